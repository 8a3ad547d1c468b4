"""Checks: the NVIDIA kernel driver, and the state of each GPU."""

from __future__ import annotations

import re

from debtorch.doctor.registry import check
from debtorch.doctor.fixes import apt_install, driver_components, driver_install_fix, enable_components_fix, headers_package
from debtorch.findings import error, info, warning
from debtorch.units import human_bytes

DRIVER_PACKAGES = re.compile(
    r"^(nvidia-driver|nvidia-tesla-\d+-driver|cuda-drivers(-\d+)?|nvidia-open(-\d+)?|nvidia-kernel-dkms"
    r"|nvidia-open-kernel-dkms|nvidia-kernel-open-dkms|nvidia-driver-\d+|nvidia-tesla-\d+-kernel-dkms)$")
DATA_CENTER = re.compile(r"\b(A100|A800|H100|H200|H800|H20|GH200|B100|B200|GB200|V100|T4|L4|L40S?|A10G?|A16|A2|A30|A40|"
                         r"P100|P40|P4|K80|M60|M40|Tesla)\b")
HARD_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake")
GiB = 1024 ** 3


def _driver_packages(m):
    return sorted(p for p in (m.get("apt.packages") or {}) if DRIVER_PACKAGES.match(p))


def _blacklisted(m, module):
    return [b for b in m.get("nvidia.blacklisted") or [] if b.get("module") == module]


def _label(d):
    return f"{d.get('address')} ({d.get('name') or 'NVIDIA ' + str(d.get('device_id'))})"


# ---------------------------------------------------------------- driver
@check("driver")
def check_bound_driver(m, ctx):
    out = []
    installed = _driver_packages(m)
    for d in m.pci_gpus:
        drv = d.get("driver")
        base = {"nvidia.pci_devices.driver": drv, "apt.driver_packages": installed}
        if drv == "nouveau":
            if installed:
                if _blacklisted(m, "nouveau"):
                    fix = ("nouveau is blacklisted but was loaded at boot: rebuild the initramfs\n"
                           "sudo update-initramfs -u\nsudo reboot")
                else:
                    fix = ("echo 'blacklist nouveau' | sudo tee /etc/modprobe.d/blacklist-nouveau.conf\n"
                           "sudo update-initramfs -u\nsudo reboot")
            else:
                fix = "Install NVIDIA's driver (it blacklists nouveau), then reboot:\n" + driver_install_fix(m)
            out.append(error("driver.E001", "the GPU is bound to nouveau, not NVIDIA's driver", about=_label(d),
                             fix=fix, facts=base))
        elif drv == "nova_core":
            out.append(error("driver.E002", "the GPU is bound to nova_core, not NVIDIA's driver", about=_label(d),
                             fix="echo 'blacklist nova_core' | sudo tee /etc/modprobe.d/blacklist-nova.conf\n"
                                 "sudo update-initramfs -u\nsudo reboot"
                                 + ("" if installed else "\n" + driver_install_fix(m)),
                             facts=base))
        elif drv in ("vfio-pci", "vfio_pci"):
            out.append(warning("driver.W001", "the GPU is bound to vfio-pci (reserved for a virtual machine)",
                               about=_label(d),
                               fix="If it should train here: remove its id from `vfio-pci.ids=` on the kernel command "
                                   "line or from /etc/modprobe.d, then sudo update-initramfs -u and reboot.",
                               facts=base))
    return out


@check("driver")
def check_driver_missing(m, ctx):
    gpus = m.pci_gpus
    if not gpus or m.get("os.wsl"):
        return []
    # GPUs that NVIDIA's driver does not hold: unbound, or held by nouveau/nova_core.
    without = [d for d in gpus if d.get("driver") in (None, "nouveau", "nova_core")]
    if m.get("nvidia.kernel_module") or not without:
        return []
    installed = _driver_packages(m)
    label = _label(without[0])
    if not installed:
        if m.get("os.container"):
            return []   # containers get the driver from the host (NVIDIA Container Toolkit)
        need = driver_components(m)
        have = m.apt.components or []
        missing = [c for c in need if c not in have]
        f = {"apt.components": have, "apt.driver_packages": []}
        if missing and m.apt.components is not None:
            return [error("driver.E007", f"no NVIDIA driver installed, and APT lacks {' '.join(missing)}",
                          about=label, fix=enable_components_fix(m, need) + "\n" + driver_install_fix(m),
                          facts=f)]
        return [error("driver.E008", "no NVIDIA driver is installed", about=label, fix=driver_install_fix(m),
                      facts=f)]
    if not any(d.get("driver") is None for d in without):
        return []   # bound to nouveau/nova_core with a driver installed: driver.E001/E002 say what to do
    out = []
    headers = m.get("apt.running_kernel_headers") or {}
    files = m.get("nvidia.module_files")
    kernel = m.get("os.kernel") or "$(uname -r)"
    dkms_pkg = next((p for p in installed if "dkms" in p), "nvidia-kernel-dkms")
    if headers and headers.get("installed") is False and not headers.get("build_dir") and not files:
        out.append(error("driver.E005", f"no headers for the running kernel {kernel}: DKMS could not build the module",
                         about=label,
                         fix=apt_install(m, headers_package(m), f"linux-headers-{kernel}") + "\n"
                             f"sudo dpkg-reconfigure {dkms_pkg}\nsudo reboot",
                         facts={"apt.running_kernel_headers": headers.get("package"), "nvidia.module_files": files}))
    key = m.get("nvidia.dkms_mok_key") or {}
    if m.get("nvidia.secure_boot") and not m.get("nvidia.shim_validation_disabled") and (
            key.get("exists") is False or key.get("enrolled") is False):
        fix = ("sudo mokutil --import /var/lib/dkms/mok.pub   # choose a one-time password\n"
               "sudo reboot   # then enroll the key in the blue MOK manager screen")
        if key.get("exists") is False:
            fix = f"sudo dpkg-reconfigure {dkms_pkg}   # creates and uses /var/lib/dkms/mok.key\n" + fix
        out.append(error("driver.E004", "Secure Boot is on and the DKMS-built NVIDIA module is not signed by an enrolled key",
                         about=label, fix=fix,
                         facts={"nvidia.secure_boot": True, "nvidia.dkms_mok_key": key}))
    if not out:
        out.append(error("driver.E003", "an NVIDIA driver is installed but its kernel module is not loaded",
                         about=label,
                         fix="sudo modprobe nvidia\nsudo dmesg | grep -i -E 'nvidia|nvrm'   # why it failed\ndkms status",
                         facts={"apt.driver_packages": installed, "nvidia.modules": m.get("nvidia.modules")}))
    return out


@check("driver")
def check_driver_from_torch(m, ctx):
    """What torch (or a report's empty nvidia-smi lines) says about the driver, where the
    PCI bus was not read (a collect_env report, a recording without sysfs): the live
    checks above judge from the bus and the packages instead."""
    c = m.cuda
    if m.pci_gpus or c.failure not in ("no-driver", "driver-not-loaded"):
        return []
    gpu = next(iter(m.gpus), None)
    about = gpu.label if gpu else ""
    said = "torch found no NVIDIA driver" if c.from_torch else "no NVIDIA driver answered"
    f = {"evidence": c.evidence, "os.platform": m.os.platform, "os.wsl": m.os.wsl}
    if c.failure == "driver-not-loaded" and m.driver.linux and not m.os.container:
        return [error("driver.E003", "an NVIDIA driver is installed but its kernel module is not loaded",
                      about=about, fix="sudo modprobe nvidia\nsudo dmesg | grep -i -E 'nvidia|nvrm'   # why it failed\n"
                                       "dkms status", facts=f)]
    if m.driver.platform == "windows":
        fix = ("Install or update the NVIDIA driver on Windows (https://www.nvidia.com/Download/index.aspx)"
               + ("; inside WSL install none, then run `wsl --shutdown` in PowerShell" if m.os.wsl == 2 else ""))
    elif m.driver.platform == "macos":
        fix = ("Install NVIDIA's CUDA driver for macOS (https://www.nvidia.com/en-us/drivers/cuda/mac-driver-archive/); "
               "CUDA on macOS ended with CUDA 10.2 and macOS 10.13")
    elif m.os.container:
        fix = ("The driver comes from the container's host: install it there, and start the container with the "
               "GPUs (docker run --gpus all, NVIDIA Container Toolkit)")
    else:
        fix = ("If this machine has an NVIDIA GPU (lspci | grep -i nvidia):\n" + driver_install_fix(m)
               + "\nIf it has none: PyTorch's CPU build (https://download.pytorch.org/whl/cpu) is the one to use")
    return [error("driver.E008", f"{said}: CUDA is unavailable to PyTorch", about=about, fix=fix, facts=f)]


@check("driver")
def check_mismatch(m, ctx):
    kmod, user = m.driver.kernel_module, m.driver.libraries
    kinds = {m.get("nvidia.nvml.error_kind"), m.get("nvidia.nvidia_smi.error_kind")}
    if m.driver.mismatch or "driver_library_mismatch" in kinds:
        return [error("driver.E006", f"kernel module {kmod or '?'} and driver libraries {user or '?'} differ "
                      "(upgraded without a reboot?)",
                      fix="sudo reboot\n(or, with nothing using the GPU: sudo rmmod nvidia_uvm nvidia_drm "
                          "nvidia_modeset nvidia && sudo modprobe nvidia)",
                      facts={"nvidia.kernel_module.version": kmod, "nvidia.userspace_driver_version": user})]
    return []


@check("driver")
def check_binding(m, ctx):
    if m.get("nvidia.source") == "nvidia-smi" and m.get("nvidia.nvml.error_kind") == "binding_not_installed":
        return [info("driver.I001", "GPU facts came from nvidia-smi: the NVML binding is not installed",
                     fix="sudo apt install python3-pynvml   # contrib; or pip install nvidia-ml-py",
                     facts={"nvidia.source": "nvidia-smi"})]
    return []


# ---------------------------------------------------------------- gpu
@check("gpu")
def check_gpu_health(m, ctx):
    out = []
    for gpu in m.listed_gpus:
        g, lab = gpu.row, gpu.label
        idx = g.get("index")
        if (g.get("ecc_uncorrected_volatile") or 0) > 0:
            out.append(error("gpu.E001", f"{g['ecc_uncorrected_volatile']} uncorrected ECC errors since boot", about=lab,
                             fix=f"Drain the GPU, then sudo nvidia-smi -r -i {idx}; if aggregate counts keep growing, "
                                 "contact the vendor.",
                             facts={"ecc_uncorrected_volatile": g.get("ecc_uncorrected_volatile"),
                                    "ecc_uncorrected_aggregate": g.get("ecc_uncorrected_aggregate")}))
        if g.get("remapped_rows_failure"):
            out.append(error("gpu.E002", "row remapping failed: the GPU cannot hide bad memory any more", about=lab,
                             fix="Replace the GPU (RMA); stop scheduling jobs on it.",
                             facts={"remapped_rows_failure": True}))
        if g.get("remapped_rows_pending") or g.get("retired_pages_pending"):
            out.append(warning("gpu.W002", "a memory row or page is waiting to be remapped", about=lab,
                               fix=f"sudo nvidia-smi -r -i {idx}   # or reboot, when no job runs",
                               facts={"remapped_rows_pending": g.get("remapped_rows_pending"),
                                      "retired_pages_pending": g.get("retired_pages_pending")}))
        if g.get("compute_mode") == "prohibited":
            out.append(error("gpu.E003", "compute mode is Prohibited: no CUDA context can be created", about=lab,
                             fix=f"sudo nvidia-smi -c DEFAULT -i {idx}", facts={"compute_mode": "prohibited"}))
        reasons = g.get("throttle_reasons") or []
        hard = [r for r in reasons if r in HARD_THROTTLE]
        if "sw_power_cap" in reasons and (g.get("utilization_gpu") or 0) >= 50:
            hard.append("sw_power_cap")
        if hard:
            out.append(warning("gpu.W003", f"clocks throttled: {', '.join(hard)}", about=lab,
                               fix="Check cooling, fans and power cables; nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER",
                               facts={"throttle_reasons": reasons, "temperature_c": g.get("temperature_c"),
                                      "power_draw_w": g.get("power_draw_w")}))
        if g.get("mig_mode_current"):
            n = g.get("mig_device_count")
            split = f"{n} MIG devices" if isinstance(n, int) and n else "smaller devices"
            out.append(info("gpu.I001", f"MIG is enabled: the GPU is split into {split}", about=lab,
                            fix=f"Use CUDA_VISIBLE_DEVICES=MIG-<uuid> (nvidia-smi -L lists them), or disable it: "
                                f"sudo nvidia-smi -mig 0 -i {idx}",
                            facts={"mig_mode_current": True, "mig_device_count": n}))
        if str(g.get("virtualization_mode") or "").upper() == "VGPU":
            out.append(info("gpu.I003", "a virtual GPU (NVIDIA vGPU): its driver comes with the host's vGPU software",
                            about=lab,
                            fix="Update the driver only to the vGPU guest driver of the host's vGPU software "
                                "release, never to Debian's nvidia-driver; clocks and ECC are the host's to read.",
                            facts={"virtualization_mode": g.get("virtualization_mode")}))
    return out


@check("gpu")
def check_persistence(m, ctx):
    gpus = [gpu.row for gpu in m.listed_gpus]
    off = [g for g in gpus if g.get("persistence_mode") is False
           and (len(gpus) > 1 or DATA_CENTER.search(g.get("name") or ""))]
    if not off:
        return []
    names = ", ".join(str(g.get("index")) for g in off)
    return [warning("gpu.W001", f"persistence mode is off on {len(off)} GPU(s) ({names})",
                    fix="sudo apt install nvidia-persistenced\nsudo systemctl enable --now nvidia-persistenced",
                    facts={"gpus": [g.get("index") for g in off]})]


@check("gpu")
def check_memory_in_use(m, ctx):
    out = []
    for gpu in m.listed_gpus:
        g = gpu.row
        used, total = g.get("memory_used"), g.get("memory_total")
        procs = g.get("processes") or []
        if used is None or not total:
            continue
        if used > max(GiB, total // 10) or (procs and sum(p.get("used_memory") or 0 for p in procs) > GiB // 2):
            who = f" by {len(procs)} process(es): PIDs {', '.join(str(p.get('pid')) for p in procs[:5])}" if procs else ""
            out.append(warning("gpu.W004", f"{human_bytes(used)} of {human_bytes(total)} GPU memory is in use{who}",
                               about=gpu.label,
                               fix="nvidia-smi shows what uses it; stop it, or train on another GPU with "
                                   "CUDA_VISIBLE_DEVICES.",
                               facts={"memory_used": used, "memory_total": total, "processes": len(procs)}))
    return out


# Why a link is narrower than the GPU can run (issue 22): a laptop's GPU is wired so by its maker
# (names: "Laptop GPU", "Max-Q Design", "GTX 980M"), a virtual machine sees what its host gives it
# (nvidia-smi's virtualization mode; the kernels of cloud images: Ubuntu's -aws/-gcp/-azure flavours,
# https://ubuntu.com/kernel/variants, Debian's -cloud-amd64), and desktop boards split the CPU's 16
# graphics lanes x8/x8 when two slots are used.  Only a card alone in a narrow link is worth reseating.
LAPTOP_GPU = re.compile(r"\b(Laptop|Mobile|Max-Q Design)\b|\b\d{3,4}MX?\b", re.I)
CLOUD_KERNEL = re.compile(r"-(aws|gcp|gke|azure|oracle|ibm)\b|-cloud-(amd64|arm64)$")


def _width_fix(m, gpu, cw: int) -> str:
    narrow = [g for g in m.listed_gpus if g.value("pcie_current_width") == cw and (g.value("pcie_max_width") or 0) > cw]
    if LAPTOP_GPU.search(gpu.name or ""):
        return f"A laptop's GPU has the lanes its maker wired (x{cw}): nothing to reseat; keep tensors on the GPU."
    if str(gpu.value("virtualization_mode", "")).lower() in ("pass-through", "vgpu") or CLOUD_KERNEL.search(m.os.kernel or ""):
        return (f"A virtual machine (a cloud instance, a GPU passed through) runs the link its host gives it (x{cw}): "
                "nothing to reseat; an instance type whose GPUs run x16 if host-to-device copies bound training.")
    if cw == 1:
        return "An x1 link: a riser or an x1 slot (as mining rigs use); put the GPU in a full x16 slot for training."
    if len(narrow) > 1:
        return (f"{len(narrow)} GPUs run x{cw} each: the board shares the CPU's lanes between its slots (x8/x8 on "
                "desktop platforms), by design; a CPU with more PCIe lanes (workstation, server) gives each x16.")
    return ("Width does not drop at idle: reseat the card, use a full x16 slot, check the "
            "BIOS lane settings (sudo lspci -vv: LnkSta vs LnkCap).")


@check("gpu")
def check_pcie(m, ctx):
    out = []
    for gpu in m.listed_gpus:
        g, lab = gpu.row, gpu.label
        cg, mg = g.get("pcie_current_gen"), g.get("pcie_max_gen")
        cw, mw = g.get("pcie_current_width"), g.get("pcie_max_width")
        f = {"current": f"gen{cg} x{cw}", "max": f"gen{mg} x{mw}"}
        if cw and mw and cw < mw:
            out.append(warning("gpu.W006", f"PCIe link runs x{cw} of x{mw} lanes", about=lab,
                               fix=_width_fix(m, gpu, cw), facts=f))
        if cg and mg and cg < mg:
            busy = (g.get("utilization_gpu") or 0) >= 50 and "gpu_idle" not in (g.get("throttle_reasons") or [])
            if busy:
                out.append(warning("gpu.W005", f"PCIe link at gen{cg} of gen{mg} while the GPU is busy", about=lab,
                                   fix="Check the slot and the BIOS PCIe generation setting; risers often force gen3.",
                                   facts=f))
            else:
                out.append(info("gpu.I002", f"PCIe link at gen{cg} of gen{mg} while idle (GPUs downshift on purpose)",
                                about=lab,
                                fix="Check it under load: nvidia-smi -q -d PCIE while training; gen must reach "
                                    f"{mg} then.", facts=f))
    return out


@check("gpu")
def check_p2p(m, ctx):
    bad = m.p2p_problems
    if not bad:
        return []
    reasons = sorted({status for _, _, status in bad})
    shown = ", ".join(f"{a}-{b}" for a, b, _ in bad[:6]) + (" ..." if len(bad) > 6 else "")
    return [warning("gpu.W007", f"no peer-to-peer between {len(bad)} GPU pair(s) ({shown}): {', '.join(reasons)}",
                    fix="Check the IOMMU/ACS settings (iommu=pt on the kernel command line; ACS off in the BIOS). "
                        "Workaround for NCCL hangs: export NCCL_P2P_DISABLE=1 (debtorch tune sets it).",
                    facts={"pairs": len(bad), "p2p_read": reasons,
                           "iommu": (m.get("nvidia.kernel_cmdline") or {}).get("iommu")})]
