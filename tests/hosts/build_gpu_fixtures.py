"""Build the GPU fixture hosts under tests/hosts/ from the real files in tests/real/.

    python tests/hosts/build_gpu_fixtures.py

Each host is a fake root, ``_host.json`` (commands, rlimits, statvfs, environ)
and, where NVML works, ``_nvml.json`` (an NVML fake from debtorch.nvmlfake).
Real files are copied byte for byte; everything else is written here, with the
reason in a comment and in tests/hosts/SOURCES.md.  Rerunning rewrites the five
hosts exactly (the script is deterministic); the committed trees are what the
tests read.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REAL = ROOT / "tests" / "real"
sys.path.insert(0, str(ROOT))

from debtorch import nvmlfake  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from smi_fake import from_smi_xml  # noqa: E402

MiB = 1024 * 1024
GiB = 1024 * MiB


# ---------------------------------------------------------------------------
# Writing a fake root


class Tree:
    def __init__(self, name: str):
        self.name = name
        self.root = HERE / name
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        # Debian 12 and 13 are merged-/usr: /lib is a link to usr/lib.
        (self.root / "usr" / "lib").mkdir(parents=True)
        os.symlink("usr/lib", self.root / "lib")
        self.meta: dict = {"commands": {}, "rlimits": {}, "statvfs": {}, "environ": {}}
        self._n = 0

    def write(self, path: str, text: str) -> None:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def copy(self, path: str, real: str) -> None:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REAL / real, p)

    def bytes(self, path: str, data: bytes) -> None:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    def link(self, path: str, target: str) -> None:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():
            p.unlink()
        os.symlink(target, p)

    def dir(self, path: str) -> None:
        # git keeps no empty folders: a .keep file holds the folder.
        self.write(f"{path}/.keep", "")

    def command(self, key: str, stdout: str = "", returncode=0, stderr: str = "", error=None) -> None:
        rec = {"returncode": returncode, "stderr": stderr, "error": error}
        if len(stdout) > 512:
            self._n += 1
            (self.root / "_commands").mkdir(exist_ok=True)
            slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in key)[:50].strip("-")
            fname = f"{self._n:02d}-{slug}.out"
            (self.root / "_commands" / fname).write_text(stdout)
            rec["stdout_file"] = fname
        else:
            rec["stdout"] = stdout
        self.meta["commands"][key] = rec

    def nvml(self, data: dict) -> None:
        (self.root / "_nvml.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        self.meta["nvml"] = {"file": "_nvml.json"}

    def save(self) -> None:
        (self.root / "_host.json").write_text(json.dumps(self.meta, indent=1, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------
# Pieces shared by the hosts


def kernel(t: Tree, release: str, version_line: str, cmdline: str) -> None:
    t.write("proc/sys/kernel/osrelease", release + "\n")
    t.write("proc/version", version_line + "\n")
    t.write("proc/cmdline", cmdline + "\n")


DEB12_KERNEL = "6.1.0-28-amd64"
DEB12_PROC_VERSION = (
    "Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0, "
    "GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)"
)
DEB13_KERNEL = "6.12.48+deb13-amd64"
DEB13_PROC_VERSION = (
    "Linux version 6.12.48+deb13-amd64 (debian-kernel@lists.debian.org) (x86_64-linux-gnu-gcc-14 (Debian 14.2.0-19) "
    "14.2.0, GNU ld (GNU Binutils for Debian) 2.44) #1 SMP PREEMPT_DYNAMIC Debian 6.12.48-1 (2025-09-20)"
)


def meminfo(total_kib: int, avail_kib: int, swap_kib: int = 0) -> str:
    free = avail_kib - total_kib // 50
    return (
        f"MemTotal:       {total_kib} kB\nMemFree:        {free} kB\nMemAvailable:   {avail_kib} kB\n"
        f"Buffers:          {total_kib // 400} kB\nCached:         {total_kib // 20} kB\nSwapCached:            0 kB\n"
        f"SwapTotal:      {swap_kib} kB\nSwapFree:       {swap_kib} kB\nShmem:           {total_kib // 1000} kB\n"
        "HugePages_Total:       0\nHugePages_Free:        0\nHugepagesize:       2048 kB\n"
    )


def dpkg_status(packages: list) -> str:
    """Stanzas in dpkg's format; only the fields debtorch and apt read, plus the usual ones."""
    out = []
    for name, version, arch, extra in packages:
        st = [
            f"Package: {name}",
            "Status: install ok installed",
            "Priority: optional",
            f"Architecture: {arch}",
            f"Version: {version}",
        ]
        if extra:
            st.append(extra)
        out.append("\n".join(st))
    return "\n\n".join(out) + "\n"


def ldconfig(entries: list) -> str:
    """``ldconfig -p`` trimmed to the entries listed (the real cache has hundreds)."""
    lines = [f"{len(entries)} libs found in cache `/etc/ld.so.cache'"]
    for name, path in entries:
        lines.append(f"\t{name} (libc6,x86-64) => {path}")
    return "\n".join(lines) + "\n"


def pci_device(t: Tree, addr: str, parent: str, vendor: str, device: str, subvendor: str, subdevice: str, cls: str,
               driver, link=None, numa: int = -1) -> None:
    """A device under /sys/devices/<parent>/<addr> and its /sys/bus/pci/devices link."""
    base = f"sys/devices/{parent}/{addr}"
    t.write(f"{base}/vendor", vendor + "\n")
    t.write(f"{base}/device", device + "\n")
    t.write(f"{base}/subsystem_vendor", subvendor + "\n")
    t.write(f"{base}/subsystem_device", subdevice + "\n")
    t.write(f"{base}/class", cls + "\n")
    t.write(f"{base}/numa_node", f"{numa}\n")
    if link:
        (cs, cw), (ms, mw) = link
        t.write(f"{base}/current_link_speed", f"{cs} GT/s PCIe\n")
        t.write(f"{base}/current_link_width", f"{cw}\n")
        t.write(f"{base}/max_link_speed", f"{ms} GT/s PCIe\n")
        t.write(f"{base}/max_link_width", f"{mw}\n")
    if driver:
        depth = base.count("/")  # from sys/devices/.../<addr>/driver up to sys/
        t.link(f"{base}/driver", "../" * depth + f"bus/pci/drivers/{driver}")
    t.link(f"sys/bus/pci/devices/{addr}", f"../../../devices/{parent}/{addr}")


def net_interface(t: Tree, name: str, operstate: str, flags: int, mtu: int, mac: str, arphrd: int,
                  speed=None, carrier=True, device=None) -> None:
    """/sys/class/net/<name>: the attributes facts.network reads; ``device`` links a PCI function."""
    base = f"sys/class/net/{name}"
    t.write(f"{base}/operstate", operstate + "\n")
    t.write(f"{base}/flags", f"0x{flags:x}\n")
    t.write(f"{base}/mtu", f"{mtu}\n")
    t.write(f"{base}/address", mac + "\n")
    t.write(f"{base}/type", f"{arphrd}\n")
    if carrier is not None:
        t.write(f"{base}/carrier", "1\n" if carrier else "0\n")
    if speed is not None:
        t.write(f"{base}/speed", f"{speed}\n")
    if device:
        t.dir(f"sys/devices/{device}")
        t.link(f"{base}/device", f"../../../devices/{device}")


def ip_addr_json(entries: list) -> str:
    """``ip -j addr show`` output (iproute2's JSON) for [(ifindex, name, mtu, state, [(family, local, prefixlen)])]."""
    out = []
    for index, name, mtu, state, addrs in entries:
        out.append({"ifindex": index, "ifname": name, "mtu": mtu, "operstate": state,
                    "addr_info": [{"family": fam, "local": local, "prefixlen": plen, "scope": "global"}
                                  for fam, local, plen in addrs]})
    return json.dumps(out) + "\n"


def efivar(t: Tree, name: str, value: int) -> None:
    # efivarfs: 4 bytes of attributes (BS|RT = 0x06, as firmware sets SecureBoot) then the value byte.
    t.bytes(f"sys/firmware/efi/efivars/{name}", bytes([0x06, 0, 0, 0, value]))


def proc_version(version: str, flavor: str, build: str, gcc: str) -> str:
    if flavor == "open":
        head = f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  ({build})"
    else:
        head = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  {build}"
    return f"{head}\nGCC version:  {gcc}\n"


def proc_modules(mods: list) -> str:
    return "".join(f"{name} {size} {refs} {deps} Live 0x0000000000000000{(' ' + taint) if taint else ''}\n"
                   for name, size, refs, deps, taint in mods)


def light_probe(executable: str, version: str, prefix: str, base_prefix: str, site: str, dists: dict, torch: dict,
                libraries: list) -> str:
    return json.dumps({
        "executable": executable, "version": version, "prefix": prefix, "base_prefix": base_prefix,
        "site_dirs": [site],
        "distributions": {k: {"version": v, "location": site} for k, v in dists.items()},
        "torch": dict(torch, location=f"{site}/torch"),
        "libraries": libraries,
        "venv": prefix != base_prefix,
    }) + "\n"


def wheel_libs(site: str, layout: dict) -> list:
    out = []
    for sub, names in layout.items():
        out += [f"{site}/{sub}/{n}" for n in names]
    return out


NVIDIA_PCI_IDS = (
    "# pci.ids trimmed to the NVIDIA (10de) lines these fixtures use; the real file is\n"
    "# /usr/share/misc/pci.ids from the Debian package pci.ids (https://pci-ids.ucw.cz/).\n"
    "10de  NVIDIA Corporation\n"
    "\t10f0  GP104 High Definition Audio Controller\n"
    "\t1aef  GA102 High Definition Audio Controller\n"
    "\t1af1  GA100 [A100 NVSwitch]\n"
    "\t1b82  GP104 [GeForce GTX 1070 Ti]\n"
    "\t1eb8  TU104GL [Tesla T4]\n"
    "\t20b2  GA100 [A100 SXM4 80GB]\n"
    "\t2204  GA102 [GeForce RTX 3090]\n"
    "\t2216  GA102 [GeForce RTX 3080 Lite Hash Rate]\n"
    "10df  Emulex Corporation\n"
)


def debian_driver(t: Tree, version: str) -> str:
    """The NVIDIA driver as Debian packages it (nvidia-kernel-support, nvidia-alternative,
    glx-alternative-nvidia, libcuda1, libnvidia-ml1; NVIDIA's CUDA repository reuses that
    packaging): the real modprobe.d files behind two levels of alternatives, and the
    driver libraries in nvidia/current/ behind an alternative.  Returns the lib dir."""
    src = REAL / "debian-nvidia-kernel-support-535.261.03"
    for name in ("nvidia-blacklists-nouveau.conf", "nvidia-modprobe.conf", "nvidia-options.conf", "nvidia-load.conf"):
        t.copy(f"etc/nvidia/current/{name}", f"debian-nvidia-kernel-support-535.261.03/{name}")
    assert src.is_dir()
    t.link(f"etc/nvidia/nvidia-{version}", "current")
    for name, modprobe_name in (("nvidia-blacklists-nouveau.conf", "nvidia-blacklists-nouveau.conf"),
                                ("nvidia-modprobe.conf", "nvidia.conf")):
        t.link(f"etc/alternatives/nvidia--{name}", f"/etc/nvidia/nvidia-{version}/{name}")
        t.link(f"etc/nvidia/{name}", f"/etc/alternatives/nvidia--{name}")
        t.link(f"etc/alternatives/glx--{name}", f"/etc/nvidia/{name}")
        t.link(f"etc/modprobe.d/{modprobe_name}", f"/etc/alternatives/glx--{name}")
    t.link("etc/alternatives/nvidia--nvidia-options.conf", f"/etc/nvidia/nvidia-{version}/nvidia-options.conf")
    t.link("etc/modprobe.d/nvidia-options.conf", "/etc/alternatives/nvidia--nvidia-options.conf")
    lib = "/usr/lib/x86_64-linux-gnu"
    for so in ("libcuda.so", "libnvidia-ml.so"):
        t.link(f"{lib}/nvidia/current/{so}.1", f"{so}.{version}")
        t.write(f"{lib}/nvidia/current/{so}.{version}", "")
        t.link(f"etc/alternatives/nvidia--{so}.1-x86_64-linux-gnu", f"{lib}/nvidia/current/{so}.1")
        t.link(f"{lib}/{so}.1", f"/etc/alternatives/nvidia--{so}.1-x86_64-linux-gnu")
    return lib


def common_dirs(t: Tree) -> None:
    t.dir("dev/shm")
    t.write("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")


# ---------------------------------------------------------------------------
# 1. Debian 13 workstation, one RTX 3080, driver 595.58.03 from NVIDIA's CUDA repository


def workstation() -> None:
    t = Tree("debian13-workstation-rtx3080")
    t.copy("etc/os-release", "os-release/debian13/etc/os-release")
    t.copy("etc/debian_version", "os-release/debian13/etc/debian_version")
    t.write("proc/sys/kernel/hostname", "workstation\n")
    kernel(t, DEB13_KERNEL, DEB13_PROC_VERSION,
           f"BOOT_IMAGE=/boot/vmlinuz-{DEB13_KERNEL} root=UUID=3b6a1c2e-5d0f-4a53-9c77-1f2d8e4b6a90 ro quiet")
    common_dirs(t)
    t.write("proc/cpuinfo", ryzen_cpuinfo())
    t.write("proc/meminfo", meminfo(32 * 1024 * 1024 - 420000, 28 * 1024 * 1024, 8 * 1024 * 1024))
    t.write("proc/1/cgroup", "0::/init.scope\n")
    t.write("proc/4242/cgroup", "0::/user.slice/user-1000.slice/session-2.scope\n")
    t.link("proc/self", "4242")
    t.write("sys/fs/cgroup/cpu.max", "max 100000\n")
    t.write("sys/devices/system/node/online", "0\n")
    for i in range(16):
        t.write(f"sys/devices/system/cpu/cpufreq/policy{i}/scaling_governor", "schedutil\n")
    t.write("usr/lib/python3.13/EXTERNALLY-MANAGED", "[externally-managed]\nError=...\n")
    t.write("usr/bin/python3.13", "")
    t.link("usr/bin/python3", "python3.13")
    # APT: deb822 Debian sources with every component, and the one-line file
    # cuda-keyring writes for NVIDIA's repository.
    t.write("etc/apt/sources.list.d/debian.sources", (
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie trixie-updates\n"
        "Components: main contrib non-free non-free-firmware\nSigned-By: /usr/share/keyrings/debian-archive-keyring.pgp\n\n"
        "Types: deb\nURIs: http://security.debian.org/debian-security\nSuites: trixie-security\n"
        "Components: main contrib non-free non-free-firmware\nSigned-By: /usr/share/keyrings/debian-archive-keyring.pgp\n"))
    t.write("etc/apt/sources.list.d/cuda-debian13-x86_64.list",
            "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
            "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/ /\n")
    drv = "595.58.03-1"
    t.write("var/lib/dpkg/status", dpkg_status([
        ("libc6", "2.41-12", "amd64", "Multi-Arch: same"),
        ("python3", "3.13.5-1", "amd64", None),
        ("python3-venv", "3.13.5-1", "amd64", None),
        ("linux-image-" + DEB13_KERNEL, "6.12.48-1", "amd64", None),
        ("linux-headers-" + DEB13_KERNEL, "6.12.48-1", "amd64", None),
        ("dkms", "3.2.2-1", "all", None),
        ("mokutil", "0.7.2-1", "amd64", None),
        ("cuda-keyring", "1.1-1", "all", None),
        ("nvidia-open", drv, "amd64", None),
        ("nvidia-kernel-open-dkms", drv, "amd64", None),
        ("nvidia-driver", drv, "amd64", None),
        ("nvidia-smi", drv, "amd64", None),
        ("libcuda1", drv, "amd64", None),
        ("libnvidia-ml1", drv, "amd64", None),
        ("firmware-nvidia-gsp", drv, "amd64", None),
        ("firmware-misc-nonfree", "20250410-2", "all", None),
    ]))
    t.dir(f"lib/modules/{DEB13_KERNEL}/build")
    # Driver: the open kernel module built by DKMS, signed with Debian's DKMS key, enrolled.
    t.write("proc/driver/nvidia/version", proc_version(
        "595.58.03", "open", "root@workstation", "gcc version 14.2.0 (Debian 14.2.0-19)"))
    t.write("proc/modules", proc_modules([
        ("nvidia_uvm", 2076672, 4, "-", "(O)"),
        ("nvidia_drm", 139264, 12, "-", "(O)"),
        ("nvidia_modeset", 1638400, 13, "nvidia_drm,", "(O)"),
        ("nvidia", 11624448, 190, "nvidia_uvm,nvidia_modeset,", "(O)"),
        ("snd_hda_intel", 61440, 4, "-", ""),
        ("drm_ttm_helper", 16384, 1, "nvidia_drm,", ""),
    ]))
    for mod in ("nvidia-current", "nvidia-current-uvm", "nvidia-current-modeset", "nvidia-current-drm",
                "nvidia-current-peermem"):
        t.write(f"lib/modules/{DEB13_KERNEL}/updates/dkms/{mod}.ko.xz", "")
    t.write("var/lib/dkms/mok.pub", "-----BEGIN CERTIFICATE-----\n(stand-in: debtorch only asks whether it exists)\n"
                                    "-----END CERTIFICATE-----\n")
    t.write("usr/bin/mokutil", "")
    t.command("mokutil --test-key /var/lib/dkms/mok.pub", "/var/lib/dkms/mok.pub is already enrolled\n", returncode=1)
    lib = debian_driver(t, "595.58.03")
    t.write("usr/lib/modprobe.d/systemd.conf", "options bonding max_bonds=0\noptions dummy numdummies=0\n")
    efivar(t, "SecureBoot-8be4df61-93ca-11d2-aa0d-e0a3b1c4d8fd", 1)
    efivar(t, "SetupMode-8be4df61-93ca-11d2-aa0d-e0a3b1c4d8fd", 0)
    t.write("usr/share/misc/pci.ids", NVIDIA_PCI_IDS)
    # PCI: GPU 0c:00.0 from the XML (device 2216, subsystem 19da:1612 = ZOTAC), its audio function.
    pci_device(t, "0000:00:00.0", "pci0000:00", "0x1022", "0x1480", "0x1022", "0x1480", "0x060000", None)
    pci_device(t, "0000:0c:00.0", "pci0000:00/0000:00:03.1", "0x10de", "0x2216", "0x19da", "0x1612", "0x030000",
               "nvidia", link=(("16.0", 16), ("16.0", 16)))
    pci_device(t, "0000:0c:00.1", "pci0000:00/0000:00:03.1", "0x10de", "0x1aef", "0x19da", "0x1612", "0x040300",
               "snd_hda_intel")
    t.command("ldconfig -p", ldconfig([
        ("libnvidia-ml.so.1", "/lib/x86_64-linux-gnu/libnvidia-ml.so.1"),
        ("libm.so.6", f"{lib}/libm.so.6"),
        ("libcuda.so.1", "/lib/x86_64-linux-gnu/libcuda.so.1"),
        ("libc.so.6", f"{lib}/libc.so.6"),
    ]))
    t.command("getconf GNU_LIBC_VERSION", "glibc 2.41\n")
    # NVML: the real RTX 3080 state (nvidia-smi XML v13) as a fake.
    xml = (REAL / "nvidia-smi-xml" / "rtx-3080-595.58.03.xml").read_text()
    fake = from_smi_xml(xml, {"NVIDIA GeForce RTX 3080": "8.6"},
                                 source="tests/real/nvidia-smi-xml/rtx-3080-595.58.03.xml (nvmlfake.from_smi_xml)")
    t.nvml(fake)
    # Python: a venv with torch 2.13.0+cu130 from download.pytorch.org.
    venv = "/home/ana/venvs/torch"
    site = f"{venv}/lib/python3.13/site-packages"
    libs = wheel_libs(site, {
        "nvidia/cu13/lib": ["libcublas.so.13", "libcublasLt.so.13", "libcudart.so.13", "libcufft.so.12",
                            "libcusparse.so.12", "libnvJitLink.so.13", "libnvrtc.so.13"],
        "nvidia/cudnn/lib": ["libcudnn.so.9", "libcudnn_adv.so.9", "libcudnn_cnn.so.9",
                             "libcudnn_engines_precompiled.so.9", "libcudnn_graph.so.9", "libcudnn_heuristic.so.9",
                             "libcudnn_ops.so.9"],
        "nvidia/nccl/lib": ["libnccl.so.2"],
        "torch/lib": ["libtorch_cuda.so"],
    })
    dists = {"torch": "2.13.0+cu130", "triton": "3.7.0", "numpy": "2.3.4", "nvidia-cuda-runtime": "13.0.96",
             "nvidia-cublas": "13.1.0.3", "nvidia-cudnn-cu13": "9.20.0.48", "nvidia-nccl-cu13": "2.28.9",
             "nvidia-cuda-nvrtc": "13.0.88", "nvidia-nvjitlink": "13.0.88", "nvidia-ml-py": "13.580.82"}
    torch = {"version": "2.13.0+cu130", "cuda": "13.0", "hip": None, "rocm": None, "xpu": None,
             "git_version": "4f2d2a1e5c0b7d9e8f6a3b2c1d0e9f8a7b6c5d4e", "debug": False}
    py = f"{venv}/bin/python"
    t.command(f"{py} <probe:light>", light_probe(f"{venv}/bin/python3", "3.13.5", venv, "/usr", site, dists, torch, libs))
    t.command(f"{py} <probe:deep>", json.dumps({
        "ok": True, "warnings": [], "errors": {}, "import_seconds": 1.912, "version": "2.13.0+cu130", "cuda": "13.0",
        "hip": None, "debug": False, "cudnn_version": 92000, "mkldnn": True, "cpu_capability": "AVX2",
        "num_threads": 8, "cuda_available": True,
        "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"],
        "cuda_init": "ok", "device_count": 1, "nccl_version": "2.28.9",
        "devices": [{"index": 0, "name": "NVIDIA GeForce RTX 3080", "capability": "8.6", "total_memory": 10487660544}],
        "exercise": {"cpu": {"matmul": "ok", "conv": "ok"}, "cuda:0": {"matmul": "ok", "conv": "ok"}},
        "mapped_libraries": [f"{site}/torch/lib/libtorch_cuda.so", f"{site}/nvidia/cu13/lib/libcudart.so.13",
                             f"{site}/nvidia/cu13/lib/libcublas.so.13", f"{site}/nvidia/cu13/lib/libcublasLt.so.13",
                             f"{site}/nvidia/cudnn/lib/libcudnn.so.9", f"{site}/nvidia/cudnn/lib/libcudnn_cnn.so.9",
                             f"{site}/nvidia/nccl/lib/libnccl.so.2", f"{lib}/nvidia/current/libcuda.so.595.58.03",
                             f"{lib}/nvidia/current/libnvidia-ml.so.595.58.03"],
    }) + "\n")
    t.meta.update(machine="x86_64", python="/usr/bin/python3", affinity=list(range(16)),
                  environ={"VIRTUAL_ENV": venv})
    t.meta["rlimits"] = {"MEMLOCK": [4157022208, 4157022208], "NOFILE": [1024, 524288]}
    t.meta["statvfs"] = {"/dev/shm": {"total": 16 * GiB - 210 * MiB, "free": 16 * GiB - 212 * MiB, "used": 2 * MiB}}
    t.save()


def ryzen_cpuinfo() -> str:
    """A Ryzen 7 5800X (8 cores, 16 threads, PCIe 4.0) in /proc/cpuinfo's layout.  Hand-made: no real
    cpuinfo of a PCIe 4.0 desktop is among the shared fixtures (see SOURCES.md)."""
    flags = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
             "syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid "
             "aperfmperf rapl pni pclmulqdq monitor ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand "
             "lahf_lm cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce "
             "topoext perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 hw_pstate ssbd mba ibrs ibpb "
             "stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 erms invpcid cqm rdt_a rdseed adx smap clflushopt clwb sha_ni "
             "xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local user_shstk clzero irperf "
             "xsaveerptr rdpru wbnoinvd arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists "
             "pausefilter pfthreshold avic v_vmsave_vmload vgif v_spec_ctrl umip pku ospke vaes vpclmulqdq rdpid "
             "overflow_recov succor smca fsrm debug_swap")
    blocks = []
    for p in range(16):
        core = p % 8
        blocks.append(
            f"processor\t: {p}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 33\n"
            f"model name\t: AMD Ryzen 7 5800X 8-Core Processor\nstepping\t: 0\nmicrocode\t: 0xa201210\n"
            f"cpu MHz\t\t: 3800.000\ncache size\t: 512 KB\nphysical id\t: 0\nsiblings\t: 16\ncore id\t\t: {core}\n"
            f"cpu cores\t: 8\napicid\t\t: {core * 2 + p // 8}\ninitial apicid\t: {core * 2 + p // 8}\nfpu\t\t: yes\n"
            f"fpu_exception\t: yes\ncpuid level\t: 16\nwp\t\t: yes\nflags\t\t: {flags}\n"
            f"bugs\t\t: sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass srso\nbogomips\t: 7599.99\n"
            f"TLB size\t: 2560 4K pages\nclflush size\t: 64\ncache_alignment\t: 64\n"
            f"address sizes\t: 48 bits physical, 48 bits virtual\npower management: ts ttp tm hwpstate cpb eff_freq_ro "
            f"[13] [14]\n")
    return "\n".join(blocks) + "\n"


# ---------------------------------------------------------------------------
# 2. Debian 12 server, 8 x A100 SXM4 80GB on NVSwitch NVLink


A100_BUSES = ["01", "0b", "41", "4b", "81", "8b", "c1", "cb"]
NVSWITCH_BUSES = ["c4", "c5", "c6", "c7", "c8", "c9"]


def server() -> None:
    t = Tree("debian12-server-8xa100-nvlink")
    t.write("etc/os-release", (HERE / "debian12-vm-2core" / "etc" / "os-release").read_text())
    t.write("etc/debian_version", "12.8\n")
    t.write("proc/sys/kernel/hostname", "gpu-node-07\n")
    kernel(t, DEB12_KERNEL, DEB12_PROC_VERSION,
           f"BOOT_IMAGE=/boot/vmlinuz-{DEB12_KERNEL} root=/dev/mapper/vg0-root ro quiet intel_iommu=on iommu=pt")
    common_dirs(t)
    t.copy("proc/cpuinfo", "cpuinfo/intel-xeon-e5-2650v3-2socket-40t-cpuinfo")
    t.write("proc/meminfo", meminfo(528280360, 512000000))
    t.write("proc/1/cgroup", "0::/init.scope\n")
    t.write("proc/90210/cgroup", "0::/system.slice/slurmd.service/job_4811/step_0\n")
    t.link("proc/self", "90210")
    t.write("sys/fs/cgroup/system.slice/slurmd.service/job_4811/step_0/cpu.max", "max 100000\n")
    t.write("sys/devices/system/node/online", "0-1\n")
    for i in range(40):
        t.write(f"sys/devices/system/cpu/cpufreq/policy{i}/scaling_governor", "performance\n")
    t.write("usr/lib/python3.11/EXTERNALLY-MANAGED", "[externally-managed]\nError=...\n")
    t.write("usr/bin/python3.11", "")
    t.link("usr/bin/python3", "python3.11")
    # APT: one-line sources.list (what the bookworm installer writes) and cuda-keyring's list.
    t.write("etc/apt/sources.list", (
        "deb http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware\n"
        "deb http://deb.debian.org/debian bookworm-updates main contrib non-free non-free-firmware\n"
        "deb http://security.debian.org/debian-security bookworm-security main contrib non-free non-free-firmware\n"))
    t.write("etc/apt/sources.list.d/cuda-debian12-x86_64.list",
            "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
            "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /\n")
    drv = "535.54.03-1"
    t.write("var/lib/dpkg/status", dpkg_status([
        ("libc6", "2.36-9+deb12u9", "amd64", "Multi-Arch: same"),
        ("python3", "3.11.2-1+b1", "amd64", None),
        ("python3-venv", "3.11.2-1+b1", "amd64", None),
        ("linux-image-" + DEB12_KERNEL, "6.1.119-1", "amd64", None),
        ("linux-headers-" + DEB12_KERNEL, "6.1.119-1", "amd64", None),
        ("dkms", "3.0.10-8+deb12u1", "all", None),
        ("cuda-keyring", "1.1-1", "all", None),
        ("cuda-drivers-535", "535.54.03-1", "amd64", None),
        ("nvidia-driver", drv, "amd64", None),
        ("nvidia-kernel-dkms", drv, "amd64", None),
        ("nvidia-smi", drv, "amd64", None),
        ("libcuda1", drv, "amd64", None),
        ("libnvidia-ml1", drv, "amd64", None),
        ("nvidia-fabricmanager-535", "535.54.03-1", "amd64", None),
        ("cuda-toolkit-12-2", "12.2.0-1", "amd64", None),
        ("cuda-nvcc-12-2", "12.2.91-1", "amd64", None),
        ("cuda-cudart-12-2", "12.2.53-1", "amd64", None),
        ("libcudnn8", "8.9.4.25-1+cuda12.2", "amd64", None),
        ("libnccl2", "2.18.3-1+cuda12.2", "amd64", None),
        ("firmware-misc-nonfree", "20230210-5", "all", None),
    ]))
    t.dir(f"lib/modules/{DEB12_KERNEL}/build")
    t.write("proc/driver/nvidia/version", proc_version(
        "535.54.03", "proprietary", "Tue Jun  6 22:20:39 UTC 2023", "gcc version 12.2.0 (Debian 12.2.0-14)"))
    t.write("proc/modules", proc_modules([
        ("nvidia_peermem", 16384, 0, "-", "(POE)"),
        ("nvidia_uvm", 1384448, 0, "-", "(POE)"),
        ("nvidia_drm", 77824, 0, "-", "(POE)"),
        ("nvidia_modeset", 1286144, 1, "nvidia_drm,", "(POE)"),
        ("nvidia", 56799232, 16, "nvidia_peermem,nvidia_uvm,nvidia_modeset,", "(POE)"),
        ("ib_core", 430080, 9, "nvidia_peermem,", ""),
    ]))
    for mod in ("nvidia-current", "nvidia-current-uvm", "nvidia-current-modeset", "nvidia-current-drm",
                "nvidia-current-peermem"):
        t.write(f"lib/modules/{DEB12_KERNEL}/updates/dkms/{mod}.ko", "")
    lib = debian_driver(t, "535.54.03")
    efivar(t, "SecureBoot-8be4df61-93ca-11d2-aa0d-e0a3b1c4d8fd", 0)
    efivar(t, "SetupMode-8be4df61-93ca-11d2-aa0d-e0a3b1c4d8fd", 0)
    t.write("usr/share/misc/pci.ids", NVIDIA_PCI_IDS)
    pci_device(t, "0000:00:00.0", "pci0000:00", "0x8086", "0x2f00", "0x15d9", "0x0832", "0x060000", None, numa=0)
    for i, bus in enumerate(A100_BUSES):
        root = "pci0000:00" if i < 4 else "pci0000:80"
        sw = f"0000:{int(bus, 16) - 1:02x}:00.0"
        pci_device(t, f"0000:{bus}:00.0", f"{root}/{sw}", "0x10de", "0x20b2", "0x10de", "0x147f", "0x030200",
                   "nvidia", link=(("16.0", 16), ("16.0", 16)), numa=0 if i < 4 else 1)
    for bus in NVSWITCH_BUSES:
        pci_device(t, f"0000:{bus}:00.0", "pci0000:80/0000:c2:00.0", "0x10de", "0x1af1", "0x10de", "0x1626",
                   "0x068000", "nvidia-nvswitch", numa=1)
    t.link(f"{lib}/libcudnn.so.8", "libcudnn.so.8.9.4")
    t.link(f"{lib}/libnccl.so.2", "libnccl.so.2.18.3")
    cuda = "/usr/local/cuda-12.2"
    t.link("usr/local/cuda", "/etc/alternatives/cuda")
    t.link("etc/alternatives/cuda", cuda)
    t.link(f"{cuda}/lib64", "targets/x86_64-linux/lib")
    tl = f"{cuda}/targets/x86_64-linux/lib"
    for name, real in (("libcudart.so.12", "libcudart.so.12.2.53"), ("libcublas.so.12", "libcublas.so.12.2.1.16"),
                       ("libcublasLt.so.12", "libcublasLt.so.12.2.1.16"), ("libnvrtc.so.12", "libnvrtc.so.12.2.91")):
        t.link(f"{tl}/{name}", real)
        t.write(f"{tl}/{real}", "")
        t.link(f"{tl}/{name.rsplit('.', 1)[0]}", name)
    t.write(f"{cuda}/version.json", json.dumps({"cuda": {"name": "CUDA SDK", "version": "12.2.0"}}, indent=3) + "\n")
    t.write(f"{cuda}/bin/nvcc", "")
    t.command("/usr/local/cuda/bin/nvcc --version", (
        "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2023 NVIDIA Corporation\n"
        "Built on Tue_Jun_13_19:16:58_PDT_2023\nCuda compilation tools, release 12.2, V12.2.91\n"
        "Build cuda_12.2.r12.2/compiler.32965470_0\n"))
    t.command("ldconfig -p", ldconfig([
        ("libnvidia-ml.so.1", "/lib/x86_64-linux-gnu/libnvidia-ml.so.1"),
        ("libnccl.so.2", f"{lib}/libnccl.so.2"),
        ("libm.so.6", f"{lib}/libm.so.6"),
        ("libcudnn.so.8", f"{lib}/libcudnn.so.8"),
        ("libcudart.so.12", f"{cuda}/targets/x86_64-linux/lib/libcudart.so.12"),
        ("libcuda.so.1", "/lib/x86_64-linux-gnu/libcuda.so.1"),
        ("libc.so.6", f"{lib}/libc.so.6"),
    ]))
    t.command("getconf GNU_LIBC_VERSION", "glibc 2.36\n")
    t.nvml(a100_fake())
    # Network: a 25 GbE port for the cluster's TCP traffic, and a ConnectX-6 HDR InfiniBand HCA
    # (mlx5_0, IPoIB interface ib0) for NCCL.  Formats from the kernel's sysfs (the InfiniBand
    # attribute files as in prometheus/procfs's fixtures, see SOURCES.md); values hand-made.
    net_interface(t, "lo", "unknown", 0x9, 65536, "00:00:00:00:00:00", 772)
    net_interface(t, "eth0", "up", 0x1003, 1500, "b8:ce:f6:4e:2a:10", 1, speed=25000,
                  device="pci0000:00/0000:00:03.0/0000:17:00.0")
    net_interface(t, "ib0", "up", 0x1003, 4092,
                  "00:00:10:87:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:4e:2a:20", 32, speed=200000,
                  device="pci0000:00/0000:00:03.0/0000:17:00.1")
    ib = "sys/class/infiniband/mlx5_0"
    t.write(f"{ib}/hca_type", "MT4123\n")
    t.write(f"{ib}/fw_ver", "20.38.1002\n")
    t.link(f"{ib}/device", "../../../devices/pci0000:00/0000:00:03.0/0000:17:00.1")
    t.dir("sys/devices/pci0000:00/0000:00:03.0/0000:17:00.1/net/ib0")
    for fname, text in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("rate", "200 Gb/sec (4X HDR)"),
                        ("link_layer", "InfiniBand")):
        t.write(f"{ib}/ports/1/{fname}", text + "\n")
    venv = "/srv/venvs/train"
    site = f"{venv}/lib/python3.11/site-packages"
    libs = wheel_libs(site, {
        "nvidia/cublas/lib": ["libcublas.so.12", "libcublasLt.so.12"],
        "nvidia/cuda_nvrtc/lib": ["libnvrtc.so.12"],
        "nvidia/cuda_runtime/lib": ["libcudart.so.12"],
        "nvidia/cudnn/lib": ["libcudnn.so.9", "libcudnn_adv.so.9", "libcudnn_cnn.so.9",
                             "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
                             "libcudnn_graph.so.9", "libcudnn_heuristic.so.9", "libcudnn_ops.so.9"],
        "nvidia/cufft/lib": ["libcufft.so.11"],
        "nvidia/cusparse/lib": ["libcusparse.so.12"],
        "nvidia/nccl/lib": ["libnccl.so.2"],
        "nvidia/nvjitlink/lib": ["libnvJitLink.so.12"],
        "torch/lib": ["libtorch_cuda.so"],
    })
    dists = {"torch": "2.4.1+cu121", "triton": "3.0.0", "numpy": "1.26.4",
             "nvidia-cublas-cu12": "12.1.3.1", "nvidia-cuda-nvrtc-cu12": "12.1.105",
             "nvidia-cuda-runtime-cu12": "12.1.105", "nvidia-cudnn-cu12": "9.1.0.70", "nvidia-cufft-cu12": "11.0.2.54",
             "nvidia-cusparse-cu12": "12.1.0.106", "nvidia-nccl-cu12": "2.20.5", "nvidia-nvjitlink-cu12": "12.6.77",
             "nvidia-ml-py": "12.535.161"}
    torch = {"version": "2.4.1+cu121", "cuda": "12.1", "hip": None, "rocm": None, "xpu": None,
             "git_version": "38b96d3399a695e704ed39b60dac733c3fbf20e2", "debug": False}
    py = f"{venv}/bin/python"
    t.command(f"{py} <probe:light>", light_probe(f"{venv}/bin/python3", "3.11.2", venv, "/usr", site, dists, torch, libs))
    mig0 = {"index": 0, "name": "NVIDIA A100-SXM4-80GB MIG 1g.20gb", "capability": "8.0", "total_memory": 20937965568}
    devices = [mig0] + [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "capability": "8.0",
                         "total_memory": 85097971712} for i in range(1, 8)]
    exercise = {"cpu": {"matmul": "ok", "conv": "ok"}}
    exercise.update({f"cuda:{i}": {"matmul": "ok", "conv": "ok"} for i in range(8)})
    t.command(f"{py} <probe:deep>", json.dumps({
        "ok": True, "warnings": [], "errors": {}, "import_seconds": 2.841, "version": "2.4.1+cu121", "cuda": "12.1",
        "hip": None, "debug": False, "cudnn_version": 90100, "mkldnn": True, "cpu_capability": "AVX2",
        "num_threads": 20, "cuda_available": True,
        "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
        "cuda_init": "ok", "device_count": 8, "nccl_version": "2.20.5", "devices": devices, "exercise": exercise,
        # LD_LIBRARY_PATH puts the toolkit's cudart and cuBLAS ahead of the wheels'.
        "mapped_libraries": [f"{site}/torch/lib/libtorch_cuda.so", f"{tl}/libcudart.so.12.2.53",
                             f"{tl}/libcublas.so.12.2.1.16", f"{tl}/libcublasLt.so.12.2.1.16",
                             f"{site}/nvidia/cudnn/lib/libcudnn.so.9", f"{site}/nvidia/cudnn/lib/libcudnn_cnn.so.9",
                             f"{site}/nvidia/nccl/lib/libnccl.so.2", f"{lib}/nvidia/current/libcuda.so.535.54.03",
                             f"{lib}/nvidia/current/libnvidia-ml.so.535.54.03"],
    }) + "\n")
    # (after the probes, so that the recorded outputs keep their file names)
    t.command("ip -j addr show", ip_addr_json([
        (1, "lo", 65536, "UNKNOWN", [("inet", "127.0.0.1", 8), ("inet6", "::1", 128)]),
        (2, "eth0", 1500, "UP", [("inet", "10.10.0.7", 16)]),
        (3, "ib0", 4092, "UP", [("inet", "10.20.0.7", 16)]),
    ]))
    t.command("ofed_info -s", "MLNX_OFED_LINUX-23.10-0.5.5.0:\n")
    t.meta.update(machine="x86_64", python="/usr/bin/python3", affinity=list(range(40)),
                  environ={"VIRTUAL_ENV": venv, "LD_LIBRARY_PATH": f"{cuda}/lib64:/usr/local/lib",
                           "CUDA_HOME": cuda, "NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "5"})
    t.meta["rlimits"] = {"MEMLOCK": [-1, -1], "NOFILE": [131072, 131072]}
    t.meta["statvfs"] = {"/dev/shm": {"total": 252 * GiB, "free": 251 * GiB, "used": 1 * GiB}}
    t.save()


def a100_fake() -> dict:
    """8 A100s from the one real A100 state: GPU 0 exactly as recorded (MIG enabled), GPUs 1-7 the same
    board with their own identity and MIG off; NVLink through six NVSwitches, 12 links per GPU."""
    xml = (REAL / "nvidia-smi-xml" / "a100-sxm4-80gb-535.54.03.xml").read_text()
    one = from_smi_xml(xml, {"NVIDIA A100-SXM4-80GB": "8.0"})
    base = one["devices"][0]
    devices = []
    for i, bus in enumerate(A100_BUSES):
        d = json.loads(json.dumps(base))
        bus_id = f"00000000:{bus.upper()}:00.0"
        d["nvmlDeviceGetIndex"] = i
        if i:
            d["nvmlDeviceGetUUID"] = "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"debtorch-fixture-a100-{i}"))
            d["nvmlDeviceGetMigMode"] = [0, 0]
        d["nvmlDeviceGetPciInfo"].update(busId=bus_id, busIdLegacy=bus_id[-12:], bus=int(bus, 16),
                                         pciDeviceId=0x20B210DE, pciSubSystemId=0x147F10DE)
        states = {str(k): 1 for k in range(12)}
        states["*"] = {"nvml_error": nvmlfake.NVML_ERROR_INVALID_ARGUMENT}
        d["nvmlDeviceGetNvLinkState"] = states
        d["nvmlDeviceGetNvLinkRemoteDeviceType"] = {str(k): nvmlfake.NVML_NVLINK_DEVICE_TYPE_SWITCH for k in range(12)}
        d["nvmlDeviceGetNvLinkRemotePciInfo"] = {
            str(k): {"busId": f"00000000:{NVSWITCH_BUSES[k // 2].upper()}:00.0",
                     "busIdLegacy": f"0000:{NVSWITCH_BUSES[k // 2].upper()}:00.0", "domain": 0,
                     "bus": int(NVSWITCH_BUSES[k // 2], 16), "device": 0, "pciDeviceId": 0x1AF110DE,
                     "pciSubSystemId": 0x162610DE} for k in range(12)}
        devices.append(d)
    pairs = {}
    for i in range(8):
        for j in range(i + 1, 8):
            if i // 4 != j // 4:
                level = nvmlfake.NVML_TOPOLOGY_SYSTEM
            elif i // 2 == j // 2:
                level = nvmlfake.NVML_TOPOLOGY_MULTIPLE
            else:
                level = nvmlfake.NVML_TOPOLOGY_NODE
            pairs[f"{i},{j}"] = {"nvmlDeviceGetTopologyCommonAncestor": level,
                                 "nvmlDeviceGetP2PStatus": {"0": 0, "1": 0, "2": 0}}
    one["system"]["nvmlDeviceGetCount"] = 8
    one.update(devices=devices, pairs=pairs,
               source="tests/real/nvidia-smi-xml/a100-sxm4-80gb-535.54.03.xml x 8 (see tests/hosts/SOURCES.md)")
    return one


# ---------------------------------------------------------------------------
# 3. Debian 12 laptop, GTX 1070 Ti in a Thunderbolt enclosure, held by nouveau


def nouveau() -> None:
    t = Tree("debian12-nouveau-gtx1070ti")
    t.write("etc/os-release", (HERE / "debian12-vm-2core" / "etc" / "os-release").read_text())
    t.write("etc/debian_version", "12.8\n")
    t.write("proc/sys/kernel/hostname", "laptop\n")
    kernel(t, DEB12_KERNEL, DEB12_PROC_VERSION,
           f"BOOT_IMAGE=/boot/vmlinuz-{DEB12_KERNEL} root=UUID=0e3f7c52-9a41-4d8e-b1f0-6c2a9d4e8b17 ro quiet splash")
    common_dirs(t)
    t.copy("proc/cpuinfo", "cpuinfo/intel-core-i7-8650u-8t-laptop-cpuinfo")
    t.write("proc/meminfo", meminfo(16 * 1024 * 1024 - 380000, 13 * 1024 * 1024, 1 * 1024 * 1024))
    t.write("proc/1/cgroup", "0::/init.scope\n")
    t.write("proc/3312/cgroup", "0::/user.slice/user-1000.slice/session-3.scope\n")
    t.link("proc/self", "3312")
    t.write("sys/fs/cgroup/cpu.max", "max 100000\n")
    t.write("sys/devices/system/node/online", "0\n")
    for i in range(8):
        t.write(f"sys/devices/system/cpu/cpufreq/policy{i}/scaling_governor", "powersave\n")
    t.write("usr/lib/python3.11/EXTERNALLY-MANAGED", "[externally-managed]\nError=...\n")
    t.write("usr/bin/python3.11", "")
    t.link("usr/bin/python3", "python3.11")
    # APT: the installer's one-line sources: main and non-free-firmware, no contrib/non-free.
    t.write("etc/apt/sources.list", (
        "#deb cdrom:[Debian GNU/Linux 12.8.0 _Bookworm_ - Official amd64 DVD Binary-1 with firmware 20241109-11:05]/ "
        "bookworm contrib main non-free-firmware\n\n"
        "deb http://deb.debian.org/debian/ bookworm main non-free-firmware\n"
        "deb-src http://deb.debian.org/debian/ bookworm main non-free-firmware\n\n"
        "deb http://security.debian.org/debian-security bookworm-security main non-free-firmware\n"
        "deb http://deb.debian.org/debian/ bookworm-updates main non-free-firmware\n"))
    t.write("var/lib/dpkg/status", dpkg_status([
        ("libc6", "2.36-9+deb12u9", "amd64", "Multi-Arch: same"),
        ("python3", "3.11.2-1+b1", "amd64", None),
        ("python3-venv", "3.11.2-1+b1", "amd64", None),
        ("linux-image-" + DEB12_KERNEL, "6.1.119-1", "amd64", None),
        ("firmware-misc-nonfree", "20230210-5", "all", None),
        ("mokutil", "0.6.0-2", "amd64", None),
    ]))
    t.write("proc/modules", proc_modules([
        ("nouveau", 2846720, 3, "-", ""),
        ("mxm_wmi", 16384, 1, "nouveau,", ""),
        ("drm_ttm_helper", 16384, 1, "nouveau,", ""),
        ("ttm", 94208, 2, "nouveau,drm_ttm_helper,", ""),
        ("i915", 3620864, 27, "-", ""),
        ("thunderbolt", 393216, 0, "-", ""),
    ]))
    t.write("etc/modprobe.d/intel-microcode-blacklist.conf",
            "# The microcode module attempts to apply a microcode update when\n"
            "# it autoloads.  This is not always safe, so we block it by default.\nblacklist microcode\n")
    t.write("usr/lib/modprobe.d/systemd.conf", "options bonding max_bonds=0\noptions dummy numdummies=0\n")
    efivar(t, "SecureBoot-8be4df61-93ca-11d2-aa0d-e0a3b1c4d8fd", 1)
    efivar(t, "SetupMode-8be4df61-93ca-11d2-aa0d-e0a3b1c4d8fd", 0)
    t.write("usr/share/misc/pci.ids", NVIDIA_PCI_IDS)
    pci_device(t, "0000:00:00.0", "pci0000:00", "0x8086", "0x5914", "0x17aa", "0x2258", "0x060000", None)
    pci_device(t, "0000:00:02.0", "pci0000:00", "0x8086", "0x5917", "0x17aa", "0x2258", "0x030000", "i915",
               link=None)
    tb = "pci0000:00/0000:00:1c.0/0000:03:00.0/0000:04:01.0/0000:05:00.0/0000:06:01.0"
    pci_device(t, "0000:07:00.0", tb, "0x10de", "0x1b82", "0x1043", "0x861e", "0x030000", "nouveau",
               link=(("2.5", 4), ("8.0", 16)))
    pci_device(t, "0000:07:00.1", tb, "0x10de", "0x10f0", "0x1043", "0x861e", "0x040300", "snd_hda_intel")
    lib = "/usr/lib/x86_64-linux-gnu"
    t.command("ldconfig -p", ldconfig([("libm.so.6", f"{lib}/libm.so.6"), ("libc.so.6", f"{lib}/libc.so.6")]))
    t.command("getconf GNU_LIBC_VERSION", "glibc 2.36\n")
    # The venv has nvidia-ml-py, but there is no libnvidia-ml.so.1 to load.
    t.meta["nvml"] = {"error": "NVML did not initialise: NVML Shared Library Not Found"}
    venv = "/home/sam/venvs/torch"
    site = f"{venv}/lib/python3.11/site-packages"
    libs = wheel_libs(site, {
        "nvidia/cublas/lib": ["libcublas.so.12", "libcublasLt.so.12"],
        "nvidia/cuda_nvrtc/lib": ["libnvrtc.so.12"],
        "nvidia/cuda_runtime/lib": ["libcudart.so.12"],
        "nvidia/cudnn/lib": ["libcudnn.so.9", "libcudnn_adv.so.9", "libcudnn_cnn.so.9", "libcudnn_ops.so.9",
                             "libcudnn_graph.so.9", "libcudnn_heuristic.so.9", "libcudnn_engines_precompiled.so.9",
                             "libcudnn_engines_runtime_compiled.so.9"],
        "nvidia/nccl/lib": ["libnccl.so.2"],
        "nvidia/nvjitlink/lib": ["libnvJitLink.so.12"],
        "torch/lib": ["libtorch_cuda.so"],
    })
    dists = {"torch": "2.5.1+cu124", "triton": "3.1.0", "numpy": "2.1.3", "nvidia-cublas-cu12": "12.4.5.8",
             "nvidia-cuda-nvrtc-cu12": "12.4.127", "nvidia-cuda-runtime-cu12": "12.4.127",
             "nvidia-cudnn-cu12": "9.1.0.70", "nvidia-nccl-cu12": "2.21.5", "nvidia-nvjitlink-cu12": "12.4.127",
             "nvidia-ml-py": "12.560.30"}
    torch = {"version": "2.5.1+cu124", "cuda": "12.4", "hip": None, "rocm": None, "xpu": None,
             "git_version": "a8d6afb511a69687bbb2b7e88a3cf67917e1697e", "debug": False}
    t.command(f"{venv}/bin/python <probe:light>",
              light_probe(f"{venv}/bin/python3", "3.11.2", venv, "/usr", site, dists, torch, libs))
    t.meta.update(machine="x86_64", python="/usr/bin/python3", affinity=list(range(8)), environ={"VIRTUAL_ENV": venv})
    t.meta["rlimits"] = {"MEMLOCK": [2040111104, 2040111104], "NOFILE": [1024, 524288]}
    t.meta["statvfs"] = {"/dev/shm": {"total": 8 * GiB - 190 * MiB, "free": 8 * GiB - 230 * MiB, "used": 40 * MiB}}
    t.save()


# ---------------------------------------------------------------------------
# 4. Debian 12 VM with a passed-through RTX 3090, after a driver upgrade without reboot


def mismatch() -> None:
    t = Tree("debian12-driver-mismatch-rtx3090")
    t.write("etc/os-release", (HERE / "debian12-vm-2core" / "etc" / "os-release").read_text())
    t.write("etc/debian_version", "12.8\n")
    t.write("proc/sys/kernel/hostname", "gpu-vm\n")
    kernel(t, DEB12_KERNEL, DEB12_PROC_VERSION, f"BOOT_IMAGE=/boot/vmlinuz-{DEB12_KERNEL} root=/dev/vda1 ro "
                                                "console=ttyS0,115200n8 quiet")
    common_dirs(t)
    t.write("proc/cpuinfo", (HERE / "debian12-vm-2core" / "proc" / "cpuinfo").read_text())
    t.write("proc/meminfo", (HERE / "debian12-vm-2core" / "proc" / "meminfo").read_text())
    t.write("proc/1/cgroup", "0::/init.scope\n")
    t.write("proc/2718/cgroup", "0::/user.slice/user-1000.slice/session-1.scope\n")
    t.link("proc/self", "2718")
    t.write("sys/fs/cgroup/cpu.max", "max 100000\n")
    t.write("sys/devices/system/node/online", "0\n")
    t.write("usr/lib/python3.11/EXTERNALLY-MANAGED", "[externally-managed]\nError=...\n")
    t.write("usr/bin/python3.11", "")
    t.link("usr/bin/python3", "python3.11")
    t.write("etc/apt/sources.list.d/debian.sources", (
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main contrib non-free non-free-firmware\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n"
        "Components: main contrib non-free non-free-firmware\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"))
    t.write("etc/apt/sources.list.d/cuda-debian12-x86_64.list",
            "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
            "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /\n")
    # dpkg: the packages are already at 525.147.05 (unattended-upgrades); the module loaded is 525.105.17.
    new = "525.147.05-1"
    t.write("var/lib/dpkg/status", dpkg_status([
        ("libc6", "2.36-9+deb12u9", "amd64", "Multi-Arch: same"),
        ("python3", "3.11.2-1+b1", "amd64", None),
        ("python3-venv", "3.11.2-1+b1", "amd64", None),
        ("linux-image-" + DEB12_KERNEL, "6.1.119-1", "amd64", None),
        ("linux-headers-" + DEB12_KERNEL, "6.1.119-1", "amd64", None),
        ("dkms", "3.0.10-8+deb12u1", "all", None),
        ("cuda-keyring", "1.1-1", "all", None),
        ("cuda-drivers-525", new, "amd64", None),
        ("nvidia-driver", new, "amd64", None),
        ("nvidia-kernel-dkms", new, "amd64", None),
        ("nvidia-smi", new, "amd64", None),
        ("libcuda1", new, "amd64", None),
        ("libnvidia-ml1", new, "amd64", None),
        ("firmware-misc-nonfree", "20230210-5", "all", None),
    ]))
    t.dir(f"lib/modules/{DEB12_KERNEL}/build")
    t.copy("proc/driver/nvidia/version", "nvidia-proc/proprietary-x86_64-525.105.17-version")
    t.write("proc/modules", proc_modules([
        ("nvidia_uvm", 1540096, 0, "-", "(POE)"),
        ("nvidia_drm", 69632, 0, "-", "(POE)"),
        ("nvidia_modeset", 1241088, 1, "nvidia_drm,", "(POE)"),
        ("nvidia", 56426496, 2, "nvidia_uvm,nvidia_modeset,", "(POE)"),
    ]))
    for mod in ("nvidia-current", "nvidia-current-uvm", "nvidia-current-modeset", "nvidia-current-drm"):
        t.write(f"lib/modules/{DEB12_KERNEL}/updates/dkms/{mod}.ko", "")
    lib = debian_driver(t, "525.147.05")
    t.write("usr/share/misc/pci.ids", NVIDIA_PCI_IDS)
    pci_device(t, "0000:00:00.0", "pci0000:00", "0x8086", "0x1237", "0x1af4", "0x1100", "0x060000", None)
    # The RTX 3090 at 00:10.0 as in the XML (device id redacted there; 0x2204 is the 3090's).
    pci_device(t, "0000:00:10.0", "pci0000:00", "0x10de", "0x2204", "0x10de", "0x147d", "0x030000", "nvidia",
               link=(("2.5", 16), ("16.0", 16)))
    t.command("ldconfig -p", ldconfig([
        ("libnvidia-ml.so.1", "/lib/x86_64-linux-gnu/libnvidia-ml.so.1"),
        ("libm.so.6", f"{lib}/libm.so.6"),
        ("libcuda.so.1", "/lib/x86_64-linux-gnu/libcuda.so.1"),
        ("libc.so.6", f"{lib}/libc.so.6"),
    ]))
    t.command("getconf GNU_LIBC_VERSION", "glibc 2.36\n")
    # NVML raises NVML_ERROR_LIB_RM_VERSION_MISMATCH at nvmlInit; nvidia-smi says so in its words (exit 18).
    t.nvml({"format": nvmlfake.FORMAT, "source": "hand-made: nvmlInit fails as after an upgrade without reboot",
            "init_error": nvmlfake.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "system": {}, "devices": [], "pairs": {}})
    msg = "Failed to initialize NVML: Driver/library version mismatch\n"
    t.command("nvidia-smi -q -x", msg, returncode=18)
    t.command("nvidia-smi --query-gpu=pci.bus_id,compute_cap --format=csv,noheader", msg, returncode=18)
    venv = "/opt/venv"
    site = f"{venv}/lib/python3.11/site-packages"
    libs = wheel_libs(site, {
        "nvidia/cublas/lib": ["libcublas.so.12", "libcublasLt.so.12"],
        "nvidia/cuda_runtime/lib": ["libcudart.so.12"],
        "nvidia/cudnn/lib": ["libcudnn.so.8", "libcudnn_adv_infer.so.8", "libcudnn_adv_train.so.8",
                             "libcudnn_cnn_infer.so.8", "libcudnn_cnn_train.so.8", "libcudnn_ops_infer.so.8",
                             "libcudnn_ops_train.so.8"],
        "nvidia/nccl/lib": ["libnccl.so.2"],
        "torch/lib": ["libtorch_cuda.so"],
    })
    dists = {"torch": "2.1.2+cu121", "triton": "2.1.0", "numpy": "1.26.2", "nvidia-cublas-cu12": "12.1.3.1",
             "nvidia-cuda-runtime-cu12": "12.1.105", "nvidia-cudnn-cu12": "8.9.2.26", "nvidia-nccl-cu12": "2.18.1",
             "nvidia-ml-py": "12.535.133"}
    torch = {"version": "2.1.2+cu121", "cuda": "12.1", "hip": None, "rocm": None, "xpu": None,
             "git_version": "a8e7c98cb95ff97bb30a728c6b2a1ce6bff946eb", "debug": False}
    t.command(f"{venv}/bin/python <probe:light>",
              light_probe(f"{venv}/bin/python3", "3.11.2", venv, "/usr", site, dists, torch, libs))
    t.meta.update(machine="x86_64", python="/usr/bin/python3", affinity=[0, 1], environ={"VIRTUAL_ENV": venv})
    t.meta["rlimits"] = {"MEMLOCK": [8388608, 8388608], "NOFILE": [1024, 524288]}
    t.meta["statvfs"] = {"/dev/shm": {"total": 12 * GiB, "free": 12 * GiB, "used": 0}}
    t.save()


# ---------------------------------------------------------------------------
# 5. Docker container (Debian 12 image) on a cloud VM with a T4; /dev/shm 64 MiB


def container() -> None:
    t = Tree("debian12-container-t4-shm64m")
    t.write("etc/os-release", (HERE / "debian12-vm-2core" / "etc" / "os-release").read_text())
    t.write("etc/debian_version", "12.8\n")
    t.write(".dockerenv", "")
    t.write("proc/sys/kernel/hostname", "3f9c2b7d1e04\n")
    # The kernel is the host's (Ubuntu 20.04 on AWS).
    kernel(t, "5.15.0-1034-aws",
           "Linux version 5.15.0-1034-aws (buildd@lcy02-amd64-085) (gcc (Ubuntu 9.4.0-1ubuntu1~20.04.1) 9.4.0, "
           "GNU ld (GNU Binutils for Ubuntu) 2.34) #38~20.04.1-Ubuntu SMP Wed Mar 29 19:43:05 UTC 2023",
           "BOOT_IMAGE=/boot/vmlinuz-5.15.0-1034-aws root=PARTUUID=5f8d2ab1-01 ro console=tty1 console=ttyS0 "
           "nvme_core.io_timeout=4294967295 panic=-1")
    common_dirs(t)
    t.write("proc/cpuinfo", (HERE / "debian12-vm-2core" / "proc" / "cpuinfo").read_text())
    t.write("proc/meminfo", meminfo(16093820, 14100000))
    t.write("proc/1/cgroup", "0::/\n")
    t.write("proc/7/cgroup", "0::/\n")
    t.link("proc/self", "7")
    t.write("sys/fs/cgroup/cpu.max", "200000 100000\n")
    t.write("sys/fs/cgroup/memory.max", "12884901888\n")
    t.write("sys/devices/system/node/online", "0\n")
    t.write("etc/apt/sources.list.d/debian.sources", (
        "Types: deb\n# http://snapshot.debian.org/archive/debian/20240513T000000Z\nURIs: http://deb.debian.org/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\n# http://snapshot.debian.org/archive/debian-security/20240513T000000Z\n"
        "URIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"))
    t.write("var/lib/dpkg/status", dpkg_status([("libc6", "2.36-9+deb12u7", "amd64", "Multi-Arch: same")]))
    t.write("proc/driver/nvidia/version", proc_version(
        "515.105.01", "proprietary", "Sat Mar 11 03:19:19 UTC 2023",
        "gcc version 9.4.0 (Ubuntu 9.4.0-1ubuntu1~20.04.1)"))
    t.write("proc/modules", proc_modules([
        ("nvidia_drm", 69632, 0, "-", "(POE)"),
        ("nvidia_modeset", 1241088, 1, "nvidia_drm,", "(POE)"),
        ("nvidia_uvm", 1523712, 2, "-", "(POE)"),
        ("nvidia", 56082432, 27, "nvidia_modeset,nvidia_uvm,", "(POE)"),
    ]))
    pci_device(t, "0000:00:00.0", "pci0000:00", "0x8086", "0x1237", "0x1d0f", "0x1237", "0x060000", None)
    pci_device(t, "0000:00:1e.0", "pci0000:00", "0x10de", "0x1eb8", "0x10de", "0x12a2", "0x030200", "nvidia",
               link=(("8.0", 8), ("8.0", 16)))
    lib = "/usr/lib/x86_64-linux-gnu"
    # Mounted into the container by the NVIDIA container toolkit, which also runs ldconfig.
    t.link(f"{lib}/libcuda.so.1", "libcuda.so.515.105.01")
    t.link(f"{lib}/libnvidia-ml.so.1", "libnvidia-ml.so.515.105.01")
    t.command("ldconfig -p", ldconfig([
        ("libnvidia-ml.so.1", "/lib/x86_64-linux-gnu/libnvidia-ml.so.1"),
        ("libm.so.6", f"{lib}/libm.so.6"),
        ("libcuda.so.1", "/lib/x86_64-linux-gnu/libcuda.so.1"),
        ("libc.so.6", f"{lib}/libc.so.6"),
    ]))
    t.command("getconf GNU_LIBC_VERSION", "glibc 2.36\n")
    # No NVML binding in the image: the facts come from nvidia-smi, whose XML is the real T4 one.
    t.command("nvidia-smi -q -x", (REAL / "nvidia-smi-xml" / "tesla-t4-515.105.01.xml").read_text())
    t.command("nvidia-smi --query-gpu=pci.bus_id,compute_cap --format=csv,noheader", "00000000:00:1E.0, 7.5\n")
    site = "/usr/local/lib/python3.11/site-packages"
    libs = wheel_libs(site, {
        "nvidia/cublas/lib": ["libcublas.so.11", "libcublasLt.so.11"],
        "nvidia/cuda_nvrtc/lib": ["libnvrtc.so.11.2"],
        "nvidia/cuda_runtime/lib": ["libcudart.so.11.0"],
        "nvidia/cudnn/lib": ["libcudnn.so.8", "libcudnn_adv_infer.so.8", "libcudnn_cnn_infer.so.8",
                             "libcudnn_ops_infer.so.8", "libcudnn_adv_train.so.8", "libcudnn_cnn_train.so.8",
                             "libcudnn_ops_train.so.8"],
        "nvidia/nccl/lib": ["libnccl.so.2"],
        "torch/lib": ["libtorch_cuda.so"],
    })
    dists = {"torch": "2.0.1", "triton": "2.0.0", "numpy": "1.24.3", "nvidia-cublas-cu11": "11.10.3.66",
             "nvidia-cuda-nvrtc-cu11": "11.7.99", "nvidia-cuda-runtime-cu11": "11.7.99",
             "nvidia-cudnn-cu11": "8.5.0.96", "nvidia-nccl-cu11": "2.14.3"}
    torch = {"version": "2.0.1", "cuda": "11.7", "hip": None, "rocm": None, "xpu": None,
             "git_version": "e9ebda29d87ce0916ab08c06ab26fd3766a870e5", "debug": False}
    py = "/usr/local/bin/python3"
    t.command(f"{py} <probe:light>", light_probe(py, "3.11.4", "/usr/local", "/usr/local", site, dists, torch, libs))
    t.meta.update(machine="x86_64", python=py, affinity=[0, 1],
                  environ={"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"})
    # Docker's defaults: 64 MiB /dev/shm, 64 KiB locked memory.
    t.meta["rlimits"] = {"MEMLOCK": [65536, 65536], "NOFILE": [1048576, 1048576]}
    t.meta["statvfs"] = {"/dev/shm": {"total": 64 * MiB, "free": 64 * MiB, "used": 0}}
    t.save()


def main() -> None:
    for build in (workstation, server, nouveau, mismatch, container):
        build()
        print(f"built {build.__name__}")


if __name__ == "__main__":
    main()
