"""Checks: the NVIDIA kernel driver, and the state of each GPU."""

from __future__ import annotations

import re

from debtorch.doctor.fixes import (
    apt_install,
    apt_install_enabling,
    driver_components,
    driver_install_fix,
    enable_components_fix,
    headers_package,
    host_side,
)
from debtorch.doctor.registry import Context, check
from debtorch.findings import Finding, finding
from debtorch.machine import GPU, Machine
from debtorch.units import human_bytes

DRIVER_PACKAGES = re.compile(
    r"^(nvidia-driver|nvidia-tesla-\d+-driver|cuda-drivers(-\d+)?|nvidia-open(-\d+)?|nvidia-kernel-dkms"
    r"|nvidia-open-kernel-dkms|nvidia-kernel-open-dkms|nvidia-driver-\d+|nvidia-tesla-\d+-kernel-dkms)$")
DATA_CENTER = re.compile(r"\b(A100|A800|H100|H200|H800|H20|GH200|B100|B200|GB200|V100|T4|L4|L40S?|A10G?|A16|A2|A30|A40|"
                         r"P100|P40|P4|K80|M60|M40|Tesla)\b")
HARD_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake")
GiB = 1024 ** 3


def _driver_packages(m: Machine) -> list[str]:
    return sorted(p for p in (m.get("apt.packages") or {}) if DRIVER_PACKAGES.match(p))


def _blacklisted(m: Machine, module: str) -> list[dict]:
    return [b for b in m.get("nvidia.blacklisted") or [] if b.get("module") == module]


def _lines(text: str) -> str:
    """``text`` as the first lines of a fix template ("" stays ""): what ``{install}`` holds where
    the next line follows it directly."""
    return f"{text}\n" if text else ""


def _label(d: dict) -> str:
    return f"{d.get('address')} ({d.get('name') or 'NVIDIA ' + str(d.get('device_id'))})"


# ---------------------------------------------------------------- driver
@check("driver")
def check_bound_driver(m: Machine, ctx: Context) -> list[Finding]:
    out = []
    installed = _driver_packages(m)
    for d in m.gpus.pci:
        drv = d.get("driver")
        base = {"nvidia.pci_devices.driver": drv, "apt.driver_packages": installed}
        if drv == "nouveau":
            if not installed:
                variant = ""
            elif _blacklisted(m, "nouveau"):
                variant = "blacklisted"
            else:
                variant = "not_blacklisted"
            out.append(finding("driver.E001", variant=host_side(m, variant),
                               install="" if installed else driver_install_fix(m), about=_label(d), facts=base))
        elif drv == "nova_core":
            out.append(finding("driver.E002", variant=host_side(m), install="" if installed else "\n" + driver_install_fix(m),
                               about=_label(d), facts=base))
        elif drv in ("vfio-pci", "vfio_pci"):
            out.append(finding("driver.W001", about=_label(d), facts=base))
    return out


@check("driver")
def check_driver_missing(m: Machine, ctx: Context) -> list[Finding]:
    gpus = m.gpus.pci
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
            return [finding("driver.E007", missing=" ".join(missing), enable=enable_components_fix(m, need),
                            install=driver_install_fix(m, enable=False), about=label, facts=f)]
        return [finding("driver.E008", install=driver_install_fix(m), about=label, facts=f)]
    if not any(d.get("driver") is None for d in without):
        return []   # bound to nouveau/nova_core with a driver installed: driver.E001/E002 say what to do
    out = []
    headers = m.get("apt.running_kernel_headers") or {}
    files = m.get("nvidia.module_files")
    kernel = m.get("os.kernel") or "$(uname -r)"
    dkms_pkg = next((p for p in installed if "dkms" in p), "nvidia-kernel-dkms")
    if headers and headers.get("installed") is False and not headers.get("build_dir") and not files:
        out.append(finding("driver.E005", variant=host_side(m), kernel=kernel, dkms=dkms_pkg, about=label,
                           install=apt_install(m, headers_package(m), f"linux-headers-{kernel}"),
                           facts={"apt.running_kernel_headers": headers.get("package"), "nvidia.module_files": files}))
    key = m.get("nvidia.dkms_mok_key") or {}
    if m.get("nvidia.secure_boot") and not m.get("nvidia.shim_validation_disabled") and (
            key.get("exists") is False or key.get("enrolled") is False):
        out.append(finding("driver.E004", variant=host_side(m, "no_key" if key.get("exists") is False else ""), dkms=dkms_pkg,
                           about=label, facts={"nvidia.secure_boot": True, "nvidia.dkms_mok_key": key}))
    if not out:
        out.append(finding("driver.E003", variant=host_side(m), about=label,
                           facts={"apt.driver_packages": installed, "nvidia.modules": m.get("nvidia.modules")}))
    return out


@check("driver")
def check_driver_from_torch(m: Machine, ctx: Context) -> list[Finding]:
    """What torch (or a report's empty nvidia-smi lines) says about the driver, where the
    PCI bus was not read (a collect_env report, a recording without sysfs): the live
    checks above judge from the bus and the packages instead."""
    c = m.cuda
    if m.gpus.pci or c.failure not in ("no-driver", "driver-not-loaded"):
        return []
    gpu = next(iter(m.gpus), None)
    about = gpu.label if gpu else ""
    said = "torch found no NVIDIA driver" if c.from_torch else "no NVIDIA driver answered"
    f = {"evidence": c.evidence, "os.platform": m.os.platform, "os.wsl": m.os.wsl}
    if c.failure == "driver-not-loaded" and m.driver.linux and not m.os.container:
        return [finding("driver.E003", about=about, facts=f)]
    if m.driver.platform == "windows":
        variant = "wsl" if m.os.wsl == 2 else "windows"
    elif m.driver.platform == "macos":
        variant = "macos"
    elif m.os.container:
        variant = "container"
    else:
        variant = "linux"
    install = driver_install_fix(m) if variant == "linux" else ""
    return [finding("driver.E008", variant=variant, said=said, install=install, about=about, facts=f)]


@check("driver")
def check_mismatch(m: Machine, ctx: Context) -> list[Finding]:
    kmod, user = m.driver.kernel_module, m.driver.libraries
    kinds = {m.get("nvidia.nvml.error_kind"), m.get("nvidia.nvidia_smi.error_kind")}
    if m.driver.mismatch or "driver_library_mismatch" in kinds:
        return [finding("driver.E006", variant=host_side(m), kmod=kmod or "?", user=user or "?",
                        facts={"nvidia.kernel_module.version": kmod, "nvidia.userspace_driver_version": user})]
    return []


@check("driver")
def check_binding(m: Machine, ctx: Context) -> list[Finding]:
    if m.get("nvidia.source") == "nvidia-smi" and m.get("nvidia.nvml.error_kind") == "binding_not_installed":
        install = apt_install_enabling(m, "python3-pynvml")
        return [finding("driver.I001", variant="" if install else "venv", install=install,
                        facts={"nvidia.source": "nvidia-smi", "apt.components": m.apt.components})]
    return []


# ---------------------------------------------------------------- gpu
@check("gpu")
def check_gpu_health(m: Machine, ctx: Context) -> list[Finding]:
    out = []
    for gpu in m.gpus.listed:
        g, lab = gpu.row, gpu.label
        idx = g.get("index")
        if (g.get("ecc_uncorrected_volatile") or 0) > 0:
            out.append(finding("gpu.E001", count=g["ecc_uncorrected_volatile"], index=idx, about=lab,
                               facts={"ecc_uncorrected_volatile": g.get("ecc_uncorrected_volatile"),
                                    "ecc_uncorrected_aggregate": g.get("ecc_uncorrected_aggregate")}))
        if g.get("remapped_rows_failure"):
            out.append(finding("gpu.E002", about=lab, facts={"remapped_rows_failure": True}))
        if g.get("remapped_rows_pending") or g.get("retired_pages_pending"):
            out.append(finding("gpu.W002", index=idx, about=lab,
                               facts={"remapped_rows_pending": g.get("remapped_rows_pending"),
                                      "retired_pages_pending": g.get("retired_pages_pending")}))
        if g.get("compute_mode") == "prohibited":
            out.append(finding("gpu.E003", index=idx, about=lab, facts={"compute_mode": "prohibited"}))
        reasons = g.get("throttle_reasons") or []
        hard = [r for r in reasons if r in HARD_THROTTLE]
        if "sw_power_cap" in reasons and (g.get("utilization_gpu") or 0) >= 50:
            hard.append("sw_power_cap")
        if hard:
            out.append(finding("gpu.W003", reasons=", ".join(hard), about=lab,
                               facts={"throttle_reasons": reasons, "temperature_c": g.get("temperature_c"),
                                      "power_draw_w": g.get("power_draw_w")}))
        if g.get("mig_mode_current"):
            n = g.get("mig_device_count")
            split = f"{n} MIG devices" if isinstance(n, int) and n else "smaller devices"
            out.append(finding("gpu.I001", split=split, index=idx, about=lab,
                               facts={"mig_mode_current": True, "mig_device_count": n}))
        licensed = {k: g.get(k) for k in ("vgpu_product", "vgpu_license") if g.get(k)}
        if str(g.get("virtualization_mode") or "").upper() == "VGPU":
            out.append(finding("gpu.I003", about=lab,
                               facts={"virtualization_mode": g.get("virtualization_mode"), **licensed}))
        elif licensed:
            out.append(finding("gpu.I003", variant="licensed", product=m.gpus.vgpu_software, about=lab,
                               facts={"virtualization_mode": g.get("virtualization_mode"), **licensed}))
    return out


@check("gpu")
def check_persistence(m: Machine, ctx: Context) -> list[Finding]:
    gpus = [gpu.row for gpu in m.gpus.listed]
    off = [g for g in gpus if g.get("persistence_mode") is False
           and (len(gpus) > 1 or DATA_CENTER.search(g.get("name") or ""))]
    if not off:
        return []
    names = ", ".join(str(g.get("index")) for g in off)
    return [finding("gpu.W001", variant=host_side(m), count=len(off), gpus=names,
                    install=_lines(apt_install_enabling(m, "nvidia-persistenced")),
                    facts={"gpus": [g.get("index") for g in off]})]


@check("gpu")
def check_memory_in_use(m: Machine, ctx: Context) -> list[Finding]:
    out = []
    for gpu in m.gpus.listed:
        g = gpu.row
        used, total = g.get("memory_used"), g.get("memory_total")
        procs = g.get("processes") or []
        if used is None or not total:
            continue
        if used > max(GiB, total // 10) or (procs and sum(p.get("used_memory") or 0 for p in procs) > GiB // 2):
            who = f" by {len(procs)} process(es): PIDs {', '.join(str(p.get('pid')) for p in procs[:5])}" if procs else ""
            out.append(finding("gpu.W004", used=human_bytes(used), total=human_bytes(total), who=who, about=gpu.label,
                               facts={"memory_used": used, "memory_total": total, "processes": len(procs)}))
    return out


# Why a link is narrower than the GPU can run: a laptop's GPU is wired so by its maker
# (names: "Laptop GPU", "Max-Q Design", "GTX 980M"), a virtual machine sees what its host gives it
# (nvidia-smi's virtualization mode; the kernels of cloud images: Ubuntu's -aws/-gcp/-azure flavours,
# https://ubuntu.com/kernel/variants, Debian's -cloud-amd64), and desktop boards split the CPU's 16
# graphics lanes x8/x8 when two slots are used.  Only a card alone in a narrow link is worth reseating.
LAPTOP_GPU = re.compile(r"\b(Laptop|Mobile|Max-Q Design)\b|\b\d{3,4}MX?\b", re.I)
CLOUD_KERNEL = re.compile(r"-(aws|gcp|gke|azure|oracle|ibm)\b|-cloud-(amd64|arm64)$")


def _width_variant(m: Machine, gpu: GPU, cw: int, narrow: int) -> str:
    """Which gpu.W006 fix: a laptop, a virtual machine, an x1 riser, lanes shared by design, WSL 2 (the
    link is the Windows machine's, lspci inside WSL does not see it), else reseat."""
    if LAPTOP_GPU.search(gpu.name or ""):
        return "laptop"
    if m.os.wsl:
        return "wsl"
    if str(gpu.value("virtualization_mode", "")).lower() in ("pass-through", "vgpu") or CLOUD_KERNEL.search(m.os.kernel or ""):
        return "vm"
    if cw == 1:
        return "x1"
    if narrow > 1:
        return "shared"
    return ""


@check("gpu")
def check_pcie(m: Machine, ctx: Context) -> list[Finding]:
    out = []
    for gpu in m.gpus.listed:
        g, lab = gpu.row, gpu.label
        cg, mg = g.get("pcie_current_gen"), g.get("pcie_max_gen")
        cw, mw = g.get("pcie_current_width"), g.get("pcie_max_width")
        f = {"current": f"gen{cg} x{cw}", "max": f"gen{mg} x{mw}"}
        if cw and mw and cw < mw:
            narrow = sum(1 for x in m.gpus.listed
                         if x.value("pcie_current_width") == cw and (x.value("pcie_max_width") or 0) > cw)
            out.append(finding("gpu.W006", variant=_width_variant(m, gpu, cw, narrow), width=cw, max_width=mw,
                               narrow=narrow, about=lab, facts=f))
        if cg and mg and cg < mg:
            busy = (g.get("utilization_gpu") or 0) >= 50 and "gpu_idle" not in (g.get("throttle_reasons") or [])
            out.append(finding("gpu.W005" if busy else "gpu.I002", gen=cg, max_gen=mg, about=lab, facts=f))
    return out


@check("gpu")
def check_p2p(m: Machine, ctx: Context) -> list[Finding]:
    bad = m.gpus.p2p_problems
    if not bad:
        return []
    reasons = sorted({status for _, _, status in bad})
    shown = ", ".join(f"{a}-{b}" for a, b, _ in bad[:6]) + (" ..." if len(bad) > 6 else "")
    return [finding("gpu.W007", count=len(bad), pairs=shown, reasons=", ".join(reasons),
                    facts={"pairs": len(bad), "p2p_read": reasons,
                           "iommu": (m.get("nvidia.kernel_cmdline") or {}).get("iommu")})]
