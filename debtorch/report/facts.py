"""``debtorch facts``: what is known about the machine, as text (pure functions) or the facts document."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Optional

from debtorch.machine import Machine
from debtorch.report import Format
from debtorch.report.console import Line
from debtorch.units import human_bytes


def show_value(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(show_value(v) for v in value) if value else "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}={show_value(v)}" for k, v in value.items()) if value else "none"
    return str(value)


def _unknown(sec: dict, name: str) -> str:
    reason = (sec.get("unknown") or {}).get(name) or (sec.get("unknown") or {}).get("*")
    return f"unknown ({reason})" if reason else "unknown"


def _val(sec: dict, name: str, fmt: Callable[[Any], str] = show_value) -> str:
    v = sec.get(name)
    return _unknown(sec, name) if v is None else fmt(v)


def facts_lines(doc: dict) -> list[str]:
    """The readable view of ``debtorch facts``."""
    lines: list[str] = []

    def head(title: str) -> None:
        if lines:
            lines.append("")
        lines.append(title)

    def row(label: str, value: str) -> None:
        lines.append(f"  {label:<22} {value}")

    m = Machine.from_facts(doc)
    o = doc.get("os") or {}
    head("OS")
    deb = m.os.debian
    name = m.os.name or _unknown(o, "id")
    if m.os.derivative:
        name += f" (derivative of Debian{(' ' + deb.release) if deb else ''})"
    elif deb and m.os.is_debian:
        name += f" [Debian {deb.release}]"
    row("distribution", name)
    row("kernel", f"{_val(o, 'kernel')} {o.get('arch') or ''}".rstrip())
    row("glibc", _val(o, "glibc"))
    row("container", o.get("container") or "none detected")
    if o.get("wsl"):
        row("WSL", f"WSL{o['wsl']}")
    row("system Python PEP 668", _val(o, "externally_managed"))

    a = doc.get("apt") or {}
    head("APT")
    row("Debian components", show_value(m.apt.components) if m.apt.components is not None else f"unknown ({m.apt.unknown})")
    row("backports", show_value(m.apt.backports))
    row("NVIDIA CUDA repo", _val(a, "cuda_repo"))
    pk = a.get("packages")
    if pk is None:
        row("packages", _unknown(a, "packages"))
    else:
        shown = {k: v for k, v in pk.items() if not k.startswith(("linux-image", "libc6", "python3"))}
        row("relevant packages", ", ".join(f"{k} {v['version']}" for k, v in sorted(shown.items())) or "none")
    if rkh := a.get("running_kernel_headers"):
        row("headers for kernel", f"{rkh['package']}: {'installed' if rkh.get('installed') else 'not installed'}")

    c = doc.get("cpu") or {}
    head("CPU")
    row("model", _val(c, "model"))
    row("cores", f"{_val(c, 'sockets')} socket(s), {_val(c, 'physical_cores')} physical, {_val(c, 'logical_cpus')} logical")
    quota = c.get("cgroup_quota_cpus")
    row("usable CPUs", f"{_val(c, 'usable_cpus')} (affinity {_val(c, 'affinity_cpus')}, cgroup quota {quota if quota is not None else 'none'})")
    row("NUMA nodes", _val(c, "numa_nodes"))
    feats = c.get("features")
    row("features", _unknown(c, "features") if feats is None else ", ".join(k for k, v in feats.items() if v) or "none of interest")
    row("governor", _val(c, "governor"))

    mem = doc.get("memory") or {}
    head("Memory")
    row("RAM", f"{_val(mem, 'total', human_bytes)} total, {_val(mem, 'available', human_bytes)} available")
    row("swap", f"{_val(mem, 'swap_total', human_bytes)} total, {_val(mem, 'swap_used', human_bytes)} used")
    row("/dev/shm", f"{_val(mem, 'shm_total', human_bytes)} total, {_val(mem, 'shm_free', human_bytes)} free")
    row("RLIMIT_MEMLOCK", f"{_val(mem, 'memlock_soft', human_bytes)} (hard {_val(mem, 'memlock_hard', human_bytes)})")
    row("RLIMIT_NOFILE", f"{_val(mem, 'nofile_soft')} (hard {_val(mem, 'nofile_hard')})")
    row("transparent hugepages", _val(mem, "transparent_hugepages"))

    s = doc.get("storage") or {}
    head("Storage")
    nv = s.get("nvme") or []
    if not nv:
        row("NVMe", "none")
    for ctrl in nv:
        link = f"PCIe gen{ctrl.get('current_gen') or '?'} x{ctrl.get('current_width') or '?'} (max gen{ctrl.get('max_gen') or '?'} x{ctrl.get('max_width') or '?'})"
        row(ctrl.get("name", "nvme"), f"{ctrl.get('model') or 'unknown model'}, firmware {ctrl.get('firmware') or '?'}, {link}")
    if d := s.get("data"):
        if not d.get("exists"):
            row("data", f"{d.get('path')}: does not exist")
        else:
            row("data", f"{d.get('path')} on {d.get('mount_point')} ({d.get('fstype')}, {_disk_kind(d)}), "
                        f"{human_bytes(d.get('free_bytes'))} free")

    n = doc.get("nvidia") or {}
    head("NVIDIA")
    lines.extend("  " + x for x in nvidia_lines(n))

    cu = doc.get("cuda") or {}
    head("CUDA libraries")
    lines.extend("  " + x for x in cuda_lines(cu))

    p = doc.get("python") or {}
    head("Python / PyTorch")
    row("interpreter", f"{_val(p, 'executable')} (Python {_val(p, 'version')}{', venv' if p.get('venv') else ''})")
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
    if deep := p.get("deep"):
        if deep.get("errors", {}).get("import"):
            row("import torch", deep["errors"]["import"])
        elif deep.get("ok"):
            row("cuda.is_available()", show_value(deep.get("cuda_available")))
            if deep.get("arch_list"):
                row("arch list", " ".join(deep["arch_list"]))
            for dev, res in (deep.get("exercise") or {}).items():
                row(f"exercise {dev}", f"matmul {res.get('matmul')}, conv {res.get('conv')}")
            for err_key, err in (deep.get("errors") or {}).items():
                row(f"error ({err_key})", err)
        else:
            row("deep probe", show_value(deep.get("errors")))

    net = m.network
    head("Network")
    if net.interfaces is None:
        row("interfaces", f"unknown ({net.unknown})")
    for i in net.interfaces or ():
        speed = f", {i.speed_mbps / 1000:g} Gb/s" if i.speed_mbps else ""
        if i.addresses:
            addrs = ", ".join(i.addresses)
        elif i.addresses is None:
            addrs = "addresses unknown"
        else:
            addrs = "no address"
        row(i.name, f"{'up' if i.up else 'down'} ({i.operstate or '?'}), MTU {i.mtu}{speed}, {i.link_type or '?'}; {addrs}")
    for p in net.ib_ports:
        row(p.label, f"{p.state or '?'} ({p.phys_state or '?'}), {p.rate or 'rate unknown'}, {p.link_layer or '?'}")
    row("OFED", net.ofed or _unknown(doc.get("network") or {}, "ofed_version"))
    for c in net.choices:
        row(c.variable, f"{c.value} -> {', '.join(c.usable) or 'no usable interface'}")
    if net.master_addr:
        row("MASTER_ADDR", f"{net.master_addr} -> " + (", ".join(net.master_addresses) if net.master_addresses
                                                       else f"does not resolve ({net.master_error})"))
    sl = m.slurm
    if sl.job_id:
        head("Slurm")
        row("job", f"{sl.job_id}" + (f" step {sl.step_id}" if sl.step_id else "") + (f", task {sl.procid} of {sl.ntasks}" if sl.ntasks else ""))
        row("nodes", f"{sl.nnodes or '?'}: {sl.nodelist or 'unknown'}")
        row("CPUs per task", str(sl.cpus_per_task) if sl.cpus_per_task else "not set (SLURM_CPUS_PER_TASK)")
        row("GPUs on this node", str(sl.gpus_on_node) if sl.gpus_on_node is not None else (sl.gpus or "none requested"))

    e = doc.get("env") or {}
    head("Environment (allowlisted)")
    vars_ = e.get("variables") or {}
    if not vars_:
        row("variables", "none set")
    for k, v in vars_.items():
        row(k, v)
    return lines


def _disk_kind(d: dict) -> str:
    """What the data folder's disk is: "network", "rotational", "SSD" or "disk type unknown"."""
    if d.get("network"):
        return "network"
    if d.get("rotational"):
        return "rotational"
    if d.get("rotational") is False:
        return "SSD"
    return "disk type unknown"


def _kv(label: str, value: str) -> str:
    return f"{label:<22} {value}"


def _link(d: dict, prefix: str = "") -> str:
    """'PCIe gen4 x16 (max gen4 x16)' from *current_gen/width and *max_gen/width fields."""
    def part(which: str) -> str:
        gen = d.get(f"{prefix}{which}_gen")
        width = d.get(f"{prefix}{which}_width")
        return f"gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"
    return f"PCIe {part('current')} (max {part('max')})"


def _gpu_value(g: dict, name: str, fmt: Callable[[Any], str] = show_value) -> str:
    v = g.get(name)
    if v is not None:
        return fmt(v)
    reason = (g.get("unknown") or {}).get(name)
    if reason == "not supported":
        return "n/a"
    if not reason:
        return "?"
    return f"? ({reason})"


def nvidia_lines(n: dict) -> list[str]:
    """The NVIDIA part of ``debtorch facts``: PCI devices, driver, GPUs, topology."""
    out: list[str] = []
    devs = n.get("pci_devices")
    if devs is None:
        out.append(_kv("PCI devices", _unknown(n, "pci_devices")))
    elif not devs:
        out.append(_kv("PCI devices", "no NVIDIA PCI device"))
    for d in devs or []:
        ident = f"[10de:{(d.get('device_id') or '????').replace('0x', '')}]"
        name = f"{d['name']} {ident}" if d.get("name") else ident
        if d.get("is_gpu"):
            numa = f", NUMA node {d['numa_node']}" if d.get("numa_node") is not None else ""
            out.append(_kv(f"PCI {d.get('address')}", f"{name}, driver {d.get('driver') or 'none'}, "
                                                       f"{_link(d)}{numa}"))
        else:
            out.append(_kv(f"PCI {d.get('address')}", f"{name} (class {d.get('class')}), "
                                                       f"driver {d.get('driver') or 'none'}"))
    if not devs and n.get("kernel_module") is None and not n.get("gpus"):
        return out
    km = n.get("kernel_module")
    out.append(_kv("kernel module", f"{km['version']} ({km['flavor']})" if km else _unknown(n, "kernel_module")))
    mods = n.get("modules")
    if mods is None:
        out.append(_kv("loaded modules", _unknown(n, "modules")))
    else:
        out.append(_kv("loaded modules", ", ".join(sorted(mods)) or "none of interest"))
    bl = n.get("blacklisted") or []
    if bl:
        out.append(_kv("blacklisted", "; ".join(f"{b['module']} ({b['how']}, {b['file']})" for b in bl)))
    if "secure_boot" in n or "uefi" in n:
        sb = n.get("secure_boot")
        boot = _unknown(n, "secure_boot") if sb is None else ("on" if sb else "off")
        out.append(_kv("Secure Boot", boot))
    if n.get("module_files"):
        key = n.get("dkms_mok_key") or {}
        if key.get("exists"):
            enrolled = {True: "enrolled", False: "NOT enrolled", None: "(enrolment unknown)"}[key.get("enrolled")]
            keytxt = f"DKMS key {key.get('path')} {enrolled}"
        else:
            keytxt = "no DKMS signing key"
        out.append(_kv("module files", f"{len(n['module_files'])} ({'DKMS' if n.get('dkms_module') else 'not DKMS'}); {keytxt}"))
    usv = n.get("userspace_driver_version")
    out.append(_kv("user-space driver", usv if usv else _unknown(n, "userspace_driver_version")))
    nvml = n.get("nvml") or {}
    if nvml.get("available"):
        out.append(_kv("NVML", f"{nvml.get('nvml_version') or 'available'}"))
    else:
        out.append(_kv("NVML", f"not available: {nvml.get('error')}"))
    smi = n.get("nvidia_smi")
    if smi and smi.get("error"):
        out.append(_kv("nvidia-smi", f"failed: {smi['error']}"))
    if n.get("driver_version"):
        cuda = n.get("cuda_driver_version")
        out.append(_kv("driver", f"{n['driver_version']} (via {n.get('source')})"
                                 + (f", supports CUDA up to {cuda}" if cuda else "")))
    gpus = n.get("gpus")
    if gpus is None:
        out.append(_kv("GPUs", _unknown(n, "gpus")))
        return out
    for g in gpus:
        mem_total = g.get("memory_total")
        mem = (f"{human_bytes(mem_total)} ({human_bytes(g.get('memory_used'))} used)" if mem_total is not None
               else "memory ?")
        cc = g.get("compute_capability")
        out.append(_kv(f"GPU {g.get('index')}", f"{g.get('name') or '?'}, {('sm ' + cc) if cc else 'sm ?'}, {mem}, "
                                                 f"{_link(g, 'pcie_')}"))
        ecc = _gpu_value(g, "ecc_mode_current", lambda v: "on" if v else "off")
        if errs := g.get("ecc_uncorrected_volatile"):
            ecc += f", {errs} uncorrected"
        mig = _gpu_value(g, "mig_mode_current", lambda v: "on" if v else "off")
        power = (f"{g['power_draw_w']:g}/{g['power_limit_w']:g} W" if g.get("power_draw_w") is not None
                 and g.get("power_limit_w") is not None else "power ?")
        temp = f"{g['temperature_c']} C" if g.get("temperature_c") is not None else "? C"
        out.append(_kv("", f"persistence {_gpu_value(g, 'persistence_mode', lambda v: 'on' if v else 'off')}, "
                           f"ECC {ecc}, MIG {mig}, compute {_gpu_value(g, 'compute_mode')}, {temp}, {power}, "
                           f"util {_gpu_value(g, 'utilization_gpu', lambda v: f'{v}%')}"))
        extra = []
        if tr := g.get("throttle_reasons"):
            extra.append("clocks held back by " + ", ".join(tr))
        if procs := g.get("processes"):
            extra.append("processes " + ", ".join(f"{p['pid']} ({human_bytes(p.get('used_memory'))})" for p in procs))
        for flag, text in (("retired_pages_pending", "page retirement pending"),
                           ("remapped_rows_pending", "row remapping pending"),
                           ("remapped_rows_failure", "row remapping FAILED")):
            if g.get(flag):
                extra.append(text)
        if extra:
            out.append(_kv("", "; ".join(extra)))
    topo = n.get("topology") or []
    if topo:
        kinds = Counter(f"NVLink x{p.get('nvlink_count')}" + (f" via {p['nvlink_via']}" if p.get("nvlink_via") else "")
                        if p.get("link") == "nvlink" else f"PCIe {p.get('pcie_level') or '?'}" for p in topo)
        out.append(_kv("GPU pairs", ", ".join(f"{c} x {k}" for k, c in kinds.items())))
        p2p = Counter(p.get("p2p_read") or "unknown" for p in topo)
        out.append(_kv("P2P read", ", ".join(f"{c} pair(s) {k}" for k, c in p2p.items())))
    return out


def cuda_lines(cu: dict) -> list[str]:
    """The CUDA-libraries part of ``debtorch facts``."""
    out: list[str] = []
    nvcc = cu.get("toolkit_nvcc")
    out.append(_kv("nvcc (a toolkit)", f"{nvcc['version']} at {nvcc['path']} (not what PyTorch runs)" if nvcc
                   else _unknown(cu, "toolkit_nvcc")))
    home = cu.get("cuda_home") or {}
    bits = [f"{k}={v}" for k, v in home.items() if v and k != "usr_local_cuda"]
    if home.get("usr_local_cuda"):
        bits.append(f"/usr/local/cuda -> {home['usr_local_cuda']}")
    out.append(_kv("CUDA_HOME", "; ".join(bits) or "not set"))

    def copies(items: Optional[list[dict]]) -> str:
        """The copies of a library, each once: a versioned file another listed name links to is the
        same copy (the name is shown)."""
        targets = {c.get("real_path") for c in items or [] if c.get("real_path") != c.get("path")}
        seen: list[str] = []
        for c in items or []:
            if c.get("path") in targets:
                continue
            v = c.get("package_version") or c.get("version") or "?"
            text = f"{c['name']} {v}"
            if text not in seen:
                seen.append(text)
        return ", ".join(seen) or "none"

    cache = cu.get("linker_cache")
    out.append(_kv("linker cache", copies([c for c in cache if "." in (c.get("name") or "").split(".so")[-1]])
                   if cache is not None else _unknown(cu, "linker_cache")))
    wheels = cu.get("wheel_libraries")
    if wheels is None:
        out.append(_kv("wheels", _unknown(cu, "wheel_libraries")))
    else:
        fams: dict = {}
        for w in wheels:
            if w.get("source") == "nvidia wheel":
                fams.setdefault(w["library"], w.get("package_version") or w.get("version") or "?")
        out.append(_kv("nvidia wheels", ", ".join(f"{k} {v}" for k, v in sorted(fams.items())) or "none"))
    for d in cu.get("ld_library_path_dirs") or []:
        here = [c for c in cu.get("ld_library_path") or [] if c.get("dir") == d["dir"]]
        out.append(_kv("LD_LIBRARY_PATH", f"{d['dir']}: " + (copies(here) if d.get("readable") else d.get("reason", "?"))))
    for s in cu.get("shadowing") or []:
        out.append(_kv("shadowing", f"{s['name']}: {s['ld_library_path_copy']} ({s.get('ld_library_path_version')}) "
                                    f"is loaded before the wheel's ({s.get('wheel_version')})"))
    return out


class FactsView:
    """``debtorch facts``: the readable view, or the document itself."""

    formats = (Format.text, Format.json)

    def __init__(self, doc: dict):
        self.doc = doc

    def lines(self) -> list:
        return [Line(text) for text in facts_lines(self.doc)]

    def document(self) -> dict:
        return self.doc
