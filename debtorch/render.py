"""Rendering, in one place: pure functions from results to text, and printers."""

from __future__ import annotations

from typing import Any, Iterable


def human_bytes(n: Any) -> str:
    if n is None:
        return "unknown"
    if not isinstance(n, (int, float)):
        return str(n)
    if n < 0:
        return "unlimited"
    step = 1024.0
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    val = float(n)
    for unit in units:
        if val < step or unit == units[-1]:
            return f"{val:.0f} {unit}" if unit == "B" else f"{val:.1f} {unit}"
        val /= step
    return f"{n} B"  # pragma: no cover


def _fmt(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt(v) for v in value) if value else "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items()) if value else "none"
    return str(value)


def _unknown(sec: dict, name: str) -> str:
    reason = (sec.get("unknown") or {}).get(name) or (sec.get("unknown") or {}).get("*")
    return f"unknown ({reason})" if reason else "unknown"


def _val(sec: dict, name: str, fmt=_fmt) -> str:
    v = sec.get(name)
    if v is None:
        return _unknown(sec, name)
    return fmt(v)


def facts_lines(doc: dict) -> list[str]:
    """The readable view of ``debtorch facts``."""
    lines: list[str] = []

    def head(title: str) -> None:
        if lines:
            lines.append("")
        lines.append(title)

    def row(label: str, value: str) -> None:
        lines.append(f"  {label:<22} {value}")

    o = doc.get("os") or {}
    head("OS")
    rel = o.get("release")
    name = o.get("pretty_name") or o.get("id") or _unknown(o, "id")
    if o.get("derivative_of"):
        name += f" (derivative of Debian{(' ' + str(o['debian_base'])) if o.get('debian_base') else ''})"
    row("distribution", name + (f" [Debian {rel}]" if rel and o.get("is_debian") else ""))
    row("kernel", f"{_val(o, 'kernel')} {o.get('arch') or ''}".rstrip())
    row("glibc", _val(o, "glibc"))
    row("container", o.get("container") or "none detected")
    if o.get("wsl"):
        row("WSL", f"WSL{o['wsl']}")
    row("system Python PEP 668", _val(o, "externally_managed"))

    a = doc.get("apt") or {}
    head("APT")
    row("components", _val(a, "components"))
    row("backports", _val(a, "backports"))
    row("NVIDIA CUDA repo", _val(a, "cuda_repo"))
    pk = a.get("packages")
    if pk is None:
        row("packages", _unknown(a, "packages"))
    else:
        shown = {k: v for k, v in pk.items() if not k.startswith(("linux-image", "libc6", "python3"))}
        row("relevant packages", ", ".join(f"{k} {v['version']}" for k, v in sorted(shown.items())) or "none")
    rkh = a.get("running_kernel_headers")
    if rkh:
        row("headers for kernel", f"{rkh['package']}: {'installed' if rkh.get('installed') else 'not installed'}")

    c = doc.get("cpu") or {}
    head("CPU")
    row("model", _val(c, "model"))
    row("cores", f"{_val(c, 'sockets')} socket(s), {_val(c, 'physical_cores')} physical, {_val(c, 'logical_cpus')} logical")
    quota = c.get("cgroup_quota_cpus")
    row("usable CPUs", f"{_val(c, 'usable_cpus')} (affinity {_val(c, 'affinity_cpus')}, cgroup quota {quota if quota is not None else 'none'})")
    row("NUMA nodes", _val(c, "numa_nodes"))
    feats = c.get("features")
    row("features", ", ".join(k for k, v in (feats or {}).items() if v) or _unknown(c, "features") if feats is None else ", ".join(k for k, v in feats.items() if v) or "none of interest")
    row("governor", _val(c, "governor"))

    m = doc.get("memory") or {}
    head("Memory")
    row("RAM", f"{_val(m, 'total', human_bytes)} total, {_val(m, 'available', human_bytes)} available")
    row("swap", f"{_val(m, 'swap_total', human_bytes)} total, {_val(m, 'swap_used', human_bytes)} used")
    row("/dev/shm", f"{_val(m, 'shm_total', human_bytes)} total, {_val(m, 'shm_free', human_bytes)} free")
    row("RLIMIT_MEMLOCK", f"{_val(m, 'memlock_soft', human_bytes)} (hard {_val(m, 'memlock_hard', human_bytes)})")
    row("RLIMIT_NOFILE", f"{_val(m, 'nofile_soft')} (hard {_val(m, 'nofile_hard')})")
    row("transparent hugepages", _val(m, "transparent_hugepages"))

    s = doc.get("storage") or {}
    head("Storage")
    nv = s.get("nvme") or []
    if not nv:
        row("NVMe", "none")
    for ctrl in nv:
        link = f"PCIe gen{ctrl.get('current_gen') or '?'} x{ctrl.get('current_width') or '?'} (max gen{ctrl.get('max_gen') or '?'} x{ctrl.get('max_width') or '?'})"
        row(ctrl.get("name", "nvme"), f"{ctrl.get('model') or 'unknown model'}, firmware {ctrl.get('firmware') or '?'}, {link}")
    d = s.get("data")
    if d:
        if not d.get("exists"):
            row("data", f"{d.get('path')}: does not exist")
        else:
            kind = "network" if d.get("network") else ("rotational" if d.get("rotational") else ("SSD" if d.get("rotational") is False else "disk type unknown"))
            row("data", f"{d.get('path')} on {d.get('mount_point')} ({d.get('fstype')}, {kind}), {human_bytes(d.get('free_bytes'))} free")

    n = doc.get("nvidia") or {}
    head("NVIDIA")
    lines.extend("  " + x for x in nvidia_lines(n))

    cu = doc.get("cuda") or {}
    head("CUDA libraries")
    lines.extend("  " + x for x in cuda_lines(cu))

    p = doc.get("python") or {}
    head("Python / PyTorch")
    row("interpreter", f"{p.get('executable')} (Python {_val(p, 'version')}{', venv' if p.get('venv') else ''})")
    t = p.get("torch")
    if t is None:
        row("torch", _unknown(p, "torch"))
    elif not t.get("installed"):
        row("torch", "not installed")
    else:
        build = f"CUDA {t['cuda']}" if t.get("cuda") else (f"ROCm {t['hip']}" if t.get("hip") else "CPU only")
        row("torch", f"{_val(t, 'version')} ({build})")
        if t.get("cudnn_wheel"):
            row("cuDNN wheel", t["cudnn_wheel"])
        if t.get("nccl_wheel"):
            row("NCCL wheel", t["nccl_wheel"])
    deep = p.get("deep")
    if deep:
        if deep.get("errors", {}).get("import"):
            row("import torch", deep["errors"]["import"])
        elif deep.get("ok"):
            row("cuda.is_available()", _fmt(deep.get("cuda_available")))
            if deep.get("arch_list"):
                row("arch list", " ".join(deep["arch_list"]))
            for dev, res in (deep.get("exercise") or {}).items():
                row(f"exercise {dev}", f"matmul {res.get('matmul')}, conv {res.get('conv')}")
            for err_key, err in (deep.get("errors") or {}).items():
                row(f"error ({err_key})", err)
        else:
            row("deep probe", _fmt(deep.get("errors")))

    e = doc.get("env") or {}
    head("Environment (allowlisted)")
    vars_ = e.get("variables") or {}
    if not vars_:
        row("variables", "none set")
    for k, v in vars_.items():
        row(k, v)
    return lines


def nvidia_lines(n: dict) -> list[str]:
    devs = n.get("pci_devices")
    if devs is None:
        return [f"PCI devices: {_unknown(n, 'pci_devices')}"]
    if not devs:
        return ["no NVIDIA PCI device"]
    out = []
    for d in devs:
        out.append(f"{d.get('address')}: {d.get('name') or d.get('device_id')} (driver: {d.get('driver') or 'none'})")
    return out


def cuda_lines(cu: dict) -> list[str]:
    nvcc = cu.get("nvcc")
    return [f"nvcc (toolkit): {nvcc.get('version') if nvcc else 'not found'}"]


def print_facts(doc: dict) -> None:
    from rich.console import Console

    Console(highlight=False, soft_wrap=True).print("\n".join(facts_lines(doc)), markup=False)


def print_lines(lines: Iterable[str]) -> None:
    from rich.console import Console

    Console(highlight=False, soft_wrap=True).print("\n".join(lines), markup=False)
