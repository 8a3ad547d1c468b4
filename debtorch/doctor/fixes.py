"""Fix texts in Debian's own terms: APT components, packages, commands, the wheel to install.

Pure functions of the machine view, shared by the checks so that every finding
says the same thing the same way.
"""

from __future__ import annotations

from typing import Optional

from debtorch import knowledge, versions
from debtorch.machine import Machine

COMPONENT_ORDER = ["main", "contrib", "non-free", "non-free-firmware"]


def driver_components(m: Machine) -> list:
    """Components the NVIDIA driver needs on this Debian (https://wiki.debian.org/NvidiaGraphicsDrivers):
    contrib, and where checks/debian.toml puts nvidia-driver and its firmware (non-free and, from
    bookworm, non-free-firmware); all three for a release the table does not know."""
    row = m.os.debian.row if m.os.debian else None
    if not row:
        return ["contrib", "non-free", "non-free-firmware"]
    want = {"contrib", row.get("nvidia_driver_component"), row.get("firmware_component")} - {None}
    return [c for c in COMPONENT_ORDER if c in want]


def headers_package(m: Machine) -> str:
    flavour = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "powerpc64le"}.get(m.os.arch or "x86_64", "amd64")
    return f"linux-headers-{flavour}"


def enable_components_fix(m: Machine, needed: list) -> str:
    """How to enable ``needed`` components in the sources this machine actually has."""
    lines = []
    seen = set()
    for e in m.get("apt.sources") or []:
        if not isinstance(e, dict) or not e.get("enabled", True) or "deb" not in (e.get("types") or []):
            continue
        if not any(knowledge.is_debian_suite(s) for s in e.get("suites") or []):
            continue
        have = e.get("components") or []
        missing = [c for c in needed if c not in have]
        key = (e.get("file"), e.get("format"))
        if not missing or key in seen:
            continue
        seen.add(key)
        merged = [c for c in COMPONENT_ORDER if c in have or c in missing] + [c for c in have if c not in COMPONENT_ORDER]
        want = " ".join(merged)
        if e.get("format") == "deb822":
            lines.append(f"In {e.get('file')}, set every Debian stanza's line to `Components: {want}`")
        else:
            lines.append(f"In {e.get('file')}, make each Debian `deb` line end in `{want}`")
    if not lines:
        want = " ".join(["main"] + needed)
        lines.append(f"Add the components to your Debian sources: `Components: {want}` (deb822) "
                     f"or `... {want}` at the end of each `deb` line (sources.list)")
    lines.append("sudo apt update")
    return "\n".join(lines)


def driver_install_fix(m: Machine) -> str:
    return (f"sudo apt install {headers_package(m)} nvidia-driver firmware-misc-nonfree\n"
            "sudo reboot")


def venv_fix() -> str:
    return ("sudo apt install python3-venv\n"
            "python3 -m venv ~/venvs/torch\n"
            "~/venvs/torch/bin/pip install torch   # add --index-url for a CUDA variant\n"
            "then run training with ~/venvs/torch/bin/python, or `debtorch doctor --python ~/venvs/torch/bin/python`")


def pip_line(m: Machine, torch_version: Optional[str]) -> Optional[dict]:
    """The official wheel that suits this machine's driver and GPUs (a knowledge row with 'pip'), or None."""
    series = (torch_version or "").split("+")[0] or knowledge.latest_series()
    if not m.gpus and m.has_nvidia_gpu is False:
        return knowledge.wheel(series, "cpu")        # known: no NVIDIA GPU here
    ccs = [g.cc for g in m.gpus if g.cc]
    driver = m.driver.version
    hypothetical = False
    if not driver:
        dd = m.debian_driver if not m.driver.cuda else None
        driver = dd["version"] if dd else None
        hypothetical = bool(driver)
    newer = False
    if driver and ccs:
        # The variant must suit the oldest GPU (the lowest compute capability).
        cc = min(ccs, key=versions.parse_cc)
        row = knowledge.best_variant_for_driver(series, driver, cc)
        if row is None and series != knowledge.latest_series():
            # No variant of this release fits (a GPU newer than the release): the newest release may.
            row = knowledge.best_variant_for_driver(knowledge.latest_series(), driver, cc)
            newer = row is not None
    else:
        row = _by_driver_only(series, driver, m.driver.cuda)
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
            verdict = knowledge.driver_cuda_supports(driver_cuda, row["cuda"])
        else:
            return None
        if verdict in ("full", "minor-compat"):
            key = (verdict == "full", versions.major_minor(row["cuda"]))
            if best is None or key > best[0]:
                best = (key, row)
    return best[1] if best else None
