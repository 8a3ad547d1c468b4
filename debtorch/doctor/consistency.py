"""Fixes that contradict each other or the facts, defined concretely: the six rules of docs/checks.md
("Fixes never contradict"), numbered as there.  :func:`contradictions` lists them for a report;
tests/test_contradictions.py runs it on every fixture machine and every corpus report.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from debtorch import knowledge, versions
from debtorch.doctor.fixes import externally_managed
from debtorch.findings import Finding
from debtorch.machine import Machine

PIP_TORCH = re.compile(r"(?:^|\s)(?P<cmd>(?:\S*/)?pip3?|\S*python3?(?:\.\d+)? -m pip) install (?P<args>[^#\n]*)")
LINUX_DRIVER = re.compile(r"apt(?:-get)? install [^\n#]*\b(nvidia-driver|cuda-drivers|nvidia-kernel-dkms|nvidia-open"
                          r"[-\w]*|nvidia-tesla-\d+-driver)\b|\bmodprobe nvidia\b(?!_uvm)")
APT_INSTALL = re.compile(r"apt(?:-get)? install ([^\n#]*)")


def _torch_target(args: str) -> Optional[tuple]:
    """(requirement, index) of the torch a pip argument list installs, or None."""
    words = args.split()
    req = next((w for w in words if re.fullmatch(r"torch(?:[=<>!~]=?[\w.*+]+)?", w)), None)
    if req is None:
        return None
    index = next((words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--index-url", "--extra-index-url")), None)
    return req, index


def _series_variant(req: str, index: Optional[str]) -> tuple:
    pin = req.split("==", 1)[1] if "==" in req else None
    parsed = versions.torch_version(pin.replace(".*", "")) if pin else None
    variant = index.rstrip("/").rsplit("/", 1)[-1] if index else None
    return (parsed["series"] if parsed else None), variant


def _no_such_wheel(m: Machine, req: str, index: Optional[str]) -> Optional[str]:
    """Why the torch a pip line installs has no wheel for this machine, or None: a pin ("==2.13.0",
    "==2.13.*") and an index name a row; without a pin pip takes any release that fits, and
    without an index PyPI's (any variant)."""
    plat, py = m.wheel_platform, m.python_version
    if plat is None:
        return f"names a torch wheel for {m.os.arch}, for which PyTorch publishes none"
    pins = [req.split("==", 1)[1].replace(".*", "")] if "==" in req else knowledge.known_series(plat)
    variant = index.rstrip("/").rsplit("/", 1)[-1] if index else None
    rows = [r for p in pins for v in ([variant] if variant else knowledge.variants(p, plat)) if (r := knowledge.wheel(p, v, plat))]
    name = f"torch {pins[0] if len(pins) == 1 else '(any release)'} ({variant or 'PyPI'})"
    if not rows or not any(knowledge.python_fits(r, py) for r in rows):
        return f"names {name}, which has no wheel for " + (f"Python {py}" if rows else plat)
    return None


def contradictions(m: Machine, findings: Iterable[Finding]) -> list:
    """One line per contradiction among ``findings`` (a report's, on machine ``m``); [] when none."""
    out = []
    installs: dict = {}
    older_said = []
    installed_packages = {name for name, row in (m.get("apt.packages") or {}).items()
                          if isinstance(row, dict) and "installed" in str(row.get("status", "installed"))}
    t = m.torch
    have_series = t.series if t.installed else None
    for f in findings:
        fix = f.fix or ""
        for match in PIP_TORCH.finditer(fix):
            args, cmd = match.group("args"), match.group("cmd")
            target = _torch_target(args)
            if target is None:
                continue
            missing = _no_such_wheel(m, *target)
            if missing:
                out.append(f"{f.id}: {missing}")
            if "--force-reinstall" in args:
                continue
            installs.setdefault(target, []).append(f.id)
            series, variant = _series_variant(*target)
            into_venv = "venvs/" in cmd or "/venv" in cmd       # a new environment: nothing is installed there
            if (t.installed and not into_venv and series and series == have_series and variant
                    and variant == t.variant):
                out.append(f"{f.id}: installs the installed torch ({t.version}) again")
            if externally_managed(m) and not into_venv:
                out.append(f"{f.id}: pip install into the externally managed {m.get('python.executable')} (PEP 668)")
            if series and have_series and versions.below(have_series, series):
                older_said.append((f.id, "newer", series))
        if re.search(r"\bolder PyTorch\b", fix):
            older_said.append((f.id, "older", None))
        if LINUX_DRIVER.search(fix):
            if m.driver.platform != "linux":
                out.append(f"{f.id}: installs a Linux driver where the {m.driver.platform} driver serves CUDA")
            elif m.os.container:
                out.append(f"{f.id}: installs a driver inside a container (the host's driver serves it)")
        for match in APT_INSTALL.finditer(fix):
            named = {w for w in match.group(1).split() if not w.startswith("-") and "$" not in w}
            again = sorted(named & installed_packages)
            if again:
                out.append(f"{f.id}: apt install of installed package(s) {', '.join(again)}")
    if len(installs) > 1:
        shown = "; ".join(f"{' '.join(x for x in k if x)} ({', '.join(v)})" for k, v in installs.items())
        out.append(f"different PyTorch installs: {shown}")
    kinds = {k for _, k, _ in older_said}
    if {"older", "newer"} <= kinds:
        out.append("one fix says an older PyTorch, another a newer release: "
                   + ", ".join(fid for fid, _, _ in older_said))
    return out

