"""``debtorch doctor``: a section per area with its mark, the findings and fixes under it,
one summary line (flutter doctor's face); or one JSON object.  Pure functions, and
:class:`DoctorView`."""

from __future__ import annotations

from collections import Counter
from typing import Optional

from debtorch.doctor import AREAS, SCHEMA_VERSION, Report
from debtorch.machine import Machine
from debtorch.report import Format, document, plural
from debtorch.report.console import Line
from debtorch.report.facts import show_value
from debtorch.units import human_bytes

MARKS_UNICODE = {"ok": "✓", "warning": "!", "error": "✗", "crash": "☠", "info": "•", "unknown": "?"}
MARKS_ASCII = {"ok": "+", "warning": "!", "error": "x", "crash": "#", "info": "-", "unknown": "?"}

AREA_SECTION = {"os": "os", "apt": "apt", "driver": "nvidia", "gpu": "nvidia", "cuda": "cuda", "torch": "python",
                "python": "python", "cpu": "cpu", "memory": "memory", "storage": "storage", "network": "network"}


def area_headline(area: str, facts: dict, m: Optional[Machine] = None) -> str:
    """One line saying what was looked at in ``area``."""
    m = m or Machine.from_facts(facts)
    sec = facts.get(AREA_SECTION.get(area, "")) or {}
    whole = (sec.get("unknown") or {}).get("*")
    if whole and area not in ("cuda", "torch") and all(k == "unknown" or v in (None, [], {}) for k, v in sec.items()):
        return f"unknown ({whole})"
    if area == "os":
        o = m.os
        bits = [o.name or "unknown OS"]
        if o.kernel:
            bits.append(f"kernel {o.kernel}")
        if o.container:
            bits.append(f"in a {o.container} container")
        if o.wsl:
            bits.append(f"WSL {o.wsl}")
        return ", ".join(bits)
    if area == "apt":
        comps = m.apt.components
        return f"components: {' '.join(comps)}" if comps else "APT sources unknown"
    if area == "driver":
        d = m.driver
        if m.has_nvidia_gpu is False and not d.version:
            return "no NVIDIA GPU"
        if not d.version:
            return "no working NVIDIA driver" if m.pci_gpus else "driver version unknown"
        text = f"driver {d.version}" + (f", supports CUDA up to {d.cuda}" if d.cuda else "")
        if d.mismatch:
            text += f" (libraries; kernel module {d.kernel_module} still loaded)"
        return text
    if area == "gpu":
        if m.listed_gpus:
            return ", ".join(f"{c} x {n}" for n, c in Counter(g.name or "GPU" for g in m.listed_gpus).items())
        if m.has_nvidia_gpu is None:
            return "unknown"
        n = len(m.pci_gpus)
        return f"{n} NVIDIA GPU(s) on the PCI bus, not reachable through NVML or nvidia-smi" if n else "none"
    if area == "cuda":
        parts = []
        if m.torch.cuda:
            parts.append(f"PyTorch built with CUDA {m.torch.cuda}")
        nv = m.get("cuda.toolkit_nvcc")
        if isinstance(nv, dict) and nv.get("version"):
            parts.append(f"nvcc {nv['version']} (toolkit)")
        return "; ".join(parts) or "no CUDA in use"
    if area == "torch":
        t = m.torch
        if not t.known:
            return "unknown"
        if not t.installed:
            return f"not installed in {t.executable}" if t.executable else "not installed"
        return f"{t.version or 'version not known'} ({t.build})"
    if area == "python":
        exe = m.get("python.executable") or "interpreter unknown"
        ver = m.get("python.version")
        return f"{exe}" + (f" (Python {ver}{', venv' if m.get('python.venv') else ''})" if ver else "")
    if area == "cpu":
        feats = [k for k, v in (m.get("cpu.features") or {}).items() if v and k in ("avx512_bf16", "amx_bf16", "avx2", "avx512f")]
        usable = m.cpus.usable if m.cpus.known else "?"
        return f"{m.cpus.model or 'unknown CPU'}, {usable} usable CPUs" + (f", {' '.join(feats)}" if feats else "")
    if area == "memory":
        return f"{human_bytes(m.get('memory.total'))} RAM, /dev/shm {human_bytes(m.get('memory.shm_total'))}"
    if area == "storage":
        d = m.get("storage.data")
        if d and d.get("exists"):
            kind = "network" if d.get("network") else ("rotational" if d.get("rotational") else "non-rotational")
            return f"data {d.get('path')} on {d.get('fstype')} ({kind})"
        n = len(m.get("storage.nvme") or [])
        return f"{n} NVMe controller(s)" + ("" if d else "; no --data given")
    return network_summary(m) if area == "network" else ""


def network_summary(m: Machine) -> str:
    """'eth0 25 Gb/s, ib0 200 Gb/s; mlx5_0 port 1 ACTIVE 200 Gb/s InfiniBand; OFED 23.10' (one line)."""
    n = m.network
    if n.interfaces is None:
        return f"unknown ({n.unknown})"
    up = [i for i in n.interfaces if i.up and not i.loopback]
    parts = [", ".join(f"{i.name}" + (f" {i.speed_mbps / 1000:g} Gb/s" if i.speed_mbps else "") for i in up)
             or "no interface up besides loopback"]
    if n.ib_ports:
        parts.append(", ".join(f"{p.label} {p.state or '?'}" + (f" {p.rate_gbps:g} Gb/s" if p.rate_gbps else "")
                               + (f" {p.link_layer}" if p.link_layer else "") for p in n.ib_ports))
    if n.ofed:
        parts.append(f"OFED {n.ofed}")
    return "; ".join(parts)


def doctor_lines(facts: dict, report: Report, verbose: bool = False, unicode: bool = True, lacking=None,
                 site_files=()) -> list:
    """The flutter-doctor-style view: a section per area, fixes under each, one summary line."""
    marks = MARKS_UNICODE if unicode else MARKS_ASCII
    by_area: dict = {}
    for f in report.findings:
        by_area.setdefault(f.area, []).append(f)
    # flutter doctor's heading; under -v the details are already shown.
    lines = [Line("Doctor summary:" if verbose else "Doctor summary (debtorch doctor -v shows details):")]
    problem_areas = 0
    not_known = []
    for area, title in AREAS:
        found = by_area.get(area, [])
        if any(f.crashed for f in found):
            kind = "crash"
        elif any(f.level == "error" for f in found):
            kind = "error"
        elif any(f.level == "warning" for f in found):
            kind = "warning"
        else:
            kind = "ok"
        if kind != "ok":
            problem_areas += 1
        if area == "site":
            head = f"rules from {', '.join(site_files)}" if site_files else "no site rules"
        else:
            head = area_headline(area, facts)
        state = report.areas.get(area)
        if state is not None and not state.known and kind == "ok":
            # Unknown never looks fine: its own mark and wording (debtorch/doctor/areas.py).
            kind = "unknown"
            not_known.append(title)
            head = state.wording if head.startswith("unknown") else f"{head}; {state.wording}"
        lines.append(Line(f"[{marks[kind]}] {title}" + (f": {head}" if head else ""), kind))
        for f in found:
            if f.level == "info" and not verbose:
                continue
            level = "crash" if f.crashed else f.level
            about = f" [{f.about}]" if f.about and not f.crashed else ""
            lines.append(Line(f"    {marks[level]} {f.message}{about} ({f.id})", level))
            if f.fix:
                fix_lines = f.fix.splitlines()
                lines.append(Line(f"      fix: {fix_lines[0]}"))
                lines.extend(Line(f"           {x}") for x in fix_lines[1:])
            if verbose and f.facts:
                lines.append(Line("      facts: " + ", ".join(f"{k}={show_value(v)}" for k, v in f.facts)))
    if lacking:
        lines.append(Line(""))
        lines.append(Line("The input did not tell (checks that need these were skipped):"))
        lines.extend(Line(f"    - {x}") for x in lacking)
    lines.append(Line(""))
    errors, warnings_ = report.count("error"), report.count("warning")
    crashed, infos = len(report.crashed), report.count("info")
    if errors or warnings_:
        parts = [plural(n, word) for n, word in ((errors, "error"), (warnings_, "warning")) if n]
        summary = f"{marks['warning']} Doctor found {' and '.join(parts)} in {plural(problem_areas, 'area')}"
        lines.append(Line(summary + (f" ({plural(crashed, 'check')} crashed)" if crashed else "") + "."))
    else:
        found_none = "No issues found in what the input shows" if not_known else "No issues found!"
        lines.append(Line(f"{marks['info']} {found_none}"
                          + (f" ({plural(infos, 'info line')} with -v)" if infos and not verbose else "")))
    if not_known:
        lines.append(Line(f"  {marks['unknown']} Not judged: {', '.join(not_known)}.", "unknown"))
    if report.silenced:
        lines.append(Line(f"  ({len(report.silenced)} finding(s) silenced by the site config: {', '.join(sorted({f.id for f in report.silenced}))})"))
    return lines


class DoctorView:
    """``debtorch doctor``: the sections, or one object with the findings and the facts they rest on."""

    formats = (Format.text, Format.json)

    def __init__(self, facts: dict, report: Report, fail_on: str, exit_code: int, site_files=(),
                 lacking: Optional[list] = None, verbose: bool = False, unicode: bool = True):
        self.facts, self.report, self.fail_on, self.exit_code = facts, report, fail_on, exit_code
        self.site_files, self.lacking, self.verbose, self.unicode = list(site_files), lacking, verbose, unicode

    def lines(self) -> list:
        return doctor_lines(self.facts, self.report, verbose=self.verbose, unicode=self.unicode,
                            lacking=self.lacking, site_files=self.site_files)

    def document(self) -> dict:
        doc = document(SCHEMA_VERSION, exit_code=self.exit_code, fail_on=self.fail_on, site_config=self.site_files,
                       **self.report.to_json(), facts=self.facts)
        if self.lacking is not None:
            doc["lacking"] = self.lacking
        return doc
