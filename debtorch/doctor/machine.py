"""Small views of the facts that several checks share (GPUs, driver, torch)."""

from __future__ import annotations

from typing import Optional

from packaging.version import InvalidVersion, Version

from debtorch import knowledge
from debtorch.facts import get


def driver_version(facts) -> Optional[str]:
    """The user-space driver version (what CUDA checks against), else the kernel module's."""
    return (get(facts, "nvidia.driver_version") or get(facts, "nvidia.nvml.driver_version")
            or get(facts, "nvidia.userspace_driver_version") or get(facts, "nvidia.kernel_module.version"))


def gpus(facts) -> list[dict]:
    """Every NVIDIA GPU as {label, name, cc}: from NVML/nvidia-smi, else from the PCI bus."""
    out = []
    for g in get(facts, "nvidia.gpus") or []:
        name = g.get("name")
        cc = g.get("compute_capability") or (knowledge.capability_for_name(name) if name else None)
        idx = g.get("index")
        out.append({"label": f"GPU {idx} ({name})" if idx is not None else (name or "GPU"), "name": name, "cc": cc,
                    "gpu": g})
    if out:
        return out
    for d in get(facts, "nvidia.pci_devices") or []:
        if not d.get("is_gpu", True):
            continue
        name = d.get("name")
        cc = knowledge.capability_for_name(name) if name else None
        out.append({"label": f"{d.get('address')} ({name or d.get('device_id')})", "name": name, "cc": cc, "gpu": None})
    return out


def has_nvidia_gpu(facts) -> bool:
    return bool(get(facts, "nvidia.pci_gpu_count") or get(facts, "nvidia.gpus")
                or any(d.get("is_gpu", True) for d in get(facts, "nvidia.pci_devices") or []))


def driver_cuda_verdict(driver_cuda, torch_cuda) -> Optional[str]:
    """too-old / minor-compat / full from the driver's highest CUDA alone (no driver version:
    a report that gives only nvidia-smi's "CUDA Version" or torch's "found version 11040")."""
    try:
        d, t = Version(str(driver_cuda)), Version(str(torch_cuda).split("+")[0])
    except InvalidVersion:
        return None
    (dm, dn), (tm, tn) = (d.release + (0,))[:2], (t.release + (0,))[:2]
    if tm > dm:
        return "too-old"
    if tm == dm and tn > dn:
        # Within a major, minor-version compatibility where checks/cuda_driver.toml says the family has it.
        need = knowledge.min_driver(f"{tm}.{tn}")
        if need is None:
            return None    # a CUDA major the table does not know
        return "minor-compat" if need["minor_compat"] else "too-old"
    return "full"


def debian_driver(facts) -> Optional[dict]:
    """Debian's packaged nvidia-driver for this release: {version, release} or None."""
    rel = get(facts, "os.release") if get(facts, "os.is_debian") else None
    row = knowledge.debian_release(rel) if rel else None
    if not row or not row.get("nvidia_driver"):
        return None
    return {"version": row["nvidia_driver"], "release": row.get("version") or rel,
            "codename": row.get("codename")}


def pip_line(torch_version: Optional[str], facts) -> Optional[dict]:
    """The official wheel that suits this machine's driver and GPUs (a knowledge row with 'pip'), or None."""
    series = (torch_version or "").split("+")[0] or knowledge.latest_series()
    gs = gpus(facts)
    devices = get(facts, "nvidia.pci_devices")
    if not gs and isinstance(devices, list) and not has_nvidia_gpu(facts):
        return knowledge.wheel(series, "cpu")        # known: no NVIDIA GPU here
    ccs = [g["cc"] for g in gs if g["cc"]]
    driver = driver_version(facts)
    hypothetical = False
    if not driver:
        dd = debian_driver(facts) if not get(facts, "nvidia.cuda_driver_version") else None
        driver = dd["version"] if dd else None
        hypothetical = bool(driver)
    newer = False
    if driver and ccs:
        # The variant must suit the oldest GPU (the lowest compute capability).
        cc = min(ccs, key=lambda c: tuple(int(x) for x in c.split(".")))
        row = knowledge.best_variant_for_driver(series, driver, cc)
        if row is None and series != knowledge.latest_series():
            # No variant of this release fits (a GPU newer than the release): the newest release may.
            row = knowledge.best_variant_for_driver(knowledge.latest_series(), driver, cc)
            newer = row is not None
    else:
        row = _by_driver_only(series, driver, get(facts, "nvidia.cuda_driver_version")
                              or get(facts, "nvidia.nvml.cuda_driver_version"))
    if row is not None:
        row = dict(row, for_driver=driver, hypothetical_driver=hypothetical, newer_release=newer)
    return row


def _by_driver_only(series: str, driver: Optional[str], driver_cuda: Optional[str]) -> Optional[dict]:
    """The newest CUDA variant of ``series`` that the driver runs, when the GPU is not known."""
    best = None
    for variant in knowledge.variants(series):
        row = knowledge.wheel(series, variant)
        if not row or not row.get("cuda") or not variant.startswith("cu"):
            continue
        if driver:
            verdict = knowledge.driver_supports(driver, row["cuda"])[0]
        elif driver_cuda:
            verdict = driver_cuda_verdict(driver_cuda, row["cuda"])
        else:
            return None
        if verdict in ("full", "minor-compat"):
            key = (verdict == "full", tuple(int(x) for x in row["cuda"].split(".")[:2]))
            if best is None or key > best[0]:
                best = (key, row)
    return best[1] if best else None
