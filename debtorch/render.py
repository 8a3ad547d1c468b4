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


# ---------------------------------------------------------------- doctor

MARKS_UNICODE = {"ok": "✓", "warning": "!", "error": "✗", "crash": "☠", "info": "•"}
MARKS_ASCII = {"ok": "+", "warning": "!", "error": "x", "crash": "#", "info": "-"}


def area_headline(area: str, facts: dict) -> str:
    """One line saying what was looked at in ``area``."""
    from debtorch.facts import get

    def g(path, default=None):
        return get(facts, path, default)

    if area == "os":
        bits = [g("os.pretty_name") or g("os.id") or "unknown OS"]
        if g("os.kernel"):
            bits.append(f"kernel {g('os.kernel')}")
        if g("os.container"):
            bits.append(f"in a {g('os.container')} container")
        if g("os.wsl"):
            bits.append(f"WSL {g('os.wsl')}")
        return ", ".join(bits)
    if area == "apt":
        comps = g("apt.components")
        return f"components: {' '.join(comps)}" if comps else "APT sources unknown"
    if area == "driver":
        if not g("nvidia.pci_devices"):
            return "no NVIDIA GPU" if g("nvidia.pci_devices") == [] else "NVIDIA devices unknown"
        ver = g("nvidia.nvml.driver_version") or g("nvidia.kernel_module.version")
        cuda = g("nvidia.nvml.cuda_driver_version")
        if ver:
            return f"driver {ver}" + (f", supports CUDA up to {cuda}" if cuda else "")
        return "no working NVIDIA driver"
    if area == "gpu":
        gpus = g("nvidia.gpus") or []
        if not gpus:
            n = len(g("nvidia.pci_devices") or [])
            return f"{n} NVIDIA device(s), not reachable through NVML" if n else "none"
        names: dict = {}
        for x in gpus:
            names[x.get("name") or "GPU"] = names.get(x.get("name") or "GPU", 0) + 1
        return ", ".join(f"{c} x {n}" for n, c in names.items())
    if area == "cuda":
        parts = []
        if g("python.torch.cuda"):
            parts.append(f"PyTorch built with CUDA {g('python.torch.cuda')}")
        nv = g("cuda.nvcc")
        if nv and nv.get("version"):
            parts.append(f"nvcc {nv['version']} (toolkit)")
        return "; ".join(parts) or "no CUDA in use"
    if area == "torch":
        t = g("python.torch") or {}
        if not t:
            return "unknown"
        if not t.get("installed"):
            return f"not installed in {g('python.executable')}"
        build = f"CUDA {t['cuda']}" if t.get("cuda") else (f"ROCm {t['hip']}" if t.get("hip") else "CPU only")
        return f"{t.get('version')} ({build})"
    if area == "python":
        exe = g("python.executable") or "?"
        ver = g("python.version")
        return f"{exe}" + (f" (Python {ver}{', venv' if g('python.venv') else ''})" if ver else "")
    if area == "cpu":
        feats = [k for k, v in (g("cpu.features") or {}).items() if v and k in ("avx512_bf16", "amx_bf16", "avx2", "avx512f")]
        return f"{g('cpu.model') or 'unknown CPU'}, {g('cpu.usable_cpus') or '?'} usable CPUs" + (
            f", {' '.join(feats)}" if feats else "")
    if area == "memory":
        return f"{human_bytes(g('memory.total'))} RAM, /dev/shm {human_bytes(g('memory.shm_total'))}"
    if area == "storage":
        d = g("storage.data")
        if d and d.get("exists"):
            kind = "network" if d.get("network") else ("rotational" if d.get("rotational") else "non-rotational")
            return f"data {d.get('path')} on {d.get('fstype')} ({kind})"
        n = len(g("storage.nvme") or [])
        return f"{n} NVMe controller(s)" + ("" if d else "; no --data given")
    return ""


def doctor_lines(facts: dict, report, verbose: bool = False, unicode: bool = True, lacking=None,
                 site_files=()) -> list[str]:
    """The flutter-doctor-style view: a section per area, fixes under each, one summary line."""
    from debtorch.doctor import AREAS

    marks = MARKS_UNICODE if unicode else MARKS_ASCII
    by_area: dict = {}
    for f in report.findings:
        by_area.setdefault(f.area, []).append(f)
    lines = ["Doctor summary (debtorch doctor -v shows details):"]
    problem_areas = 0
    for area, title in AREAS:
        found = by_area.get(area, [])
        if any(f.crashed for f in found):
            mark = marks["crash"]
        elif any(f.level == "error" for f in found):
            mark = marks["error"]
        elif any(f.level == "warning" for f in found):
            mark = marks["warning"]
        else:
            mark = marks["ok"]
        if mark != marks["ok"]:
            problem_areas += 1
        if area == "site":
            head = f"rules from {', '.join(site_files)}" if site_files else "no site rules"
        else:
            head = area_headline(area, facts)
        lines.append(f"[{mark}] {title}" + (f": {head}" if head else ""))
        for f in found:
            if f.level == "info" and not verbose:
                continue
            m = marks["crash"] if f.crashed else marks[f.level]
            about = f" [{f.about}]" if f.about and not f.crashed else ""
            lines.append(f"    {m} {f.message}{about} ({f.id})")
            if f.fix:
                fix_lines = f.fix.splitlines()
                lines.append(f"      fix: {fix_lines[0]}")
                lines.extend(f"           {x}" for x in fix_lines[1:])
            if verbose and f.facts:
                lines.append("      facts: " + ", ".join(f"{k}={_fmt(v)}" for k, v in f.facts))
    if lacking:
        lines.append("")
        lines.append("The input did not tell (checks that need these were skipped):")
        lines.extend(f"    - {x}" for x in lacking)
    lines.append("")
    errors, warnings_ = report.count("error"), report.count("warning")
    crashed = len(report.crashed)
    infos = report.count("info")
    if errors or warnings_:
        parts = []
        if errors:
            parts.append(f"{errors} error{'s' if errors != 1 else ''}")
        if warnings_:
            parts.append(f"{warnings_} warning{'s' if warnings_ != 1 else ''}")
        summary = f"{marks['warning']} Doctor found {' and '.join(parts)} in {problem_areas} area{'s' if problem_areas != 1 else ''}"
        if crashed:
            summary += f" ({crashed} check{'s' if crashed != 1 else ''} crashed)"
        lines.append(summary + ".")
    else:
        lines.append(f"{marks['info']} No issues found!" + (f" ({infos} info line{'s' if infos != 1 else ''} with -v)" if infos and not verbose else ""))
    if report.silenced:
        lines.append(f"  ({len(report.silenced)} finding(s) silenced by the site config: {', '.join(sorted({f.id for f in report.silenced}))})")
    return lines


def print_doctor(lines: list[str]) -> None:
    """Print the doctor's lines, coloured by their mark when stdout is a terminal."""
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=True)
    styles = {"[✓]": "green", "[+]": "green", "[!]": "yellow", "[✗]": "red", "[x]": "red", "[☠]": "magenta", "[#]": "magenta"}
    for line in lines:
        style = styles.get(line[:3], "")
        stripped = line.lstrip()
        if not style and stripped[:1] in ("✗", "x") and line.startswith("    "):
            style = "red"
        elif not style and stripped[:1] == "!" and line.startswith("    "):
            style = "yellow"
        console.print(Text(line, style=style))
