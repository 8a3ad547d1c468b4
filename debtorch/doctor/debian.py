"""Fix texts in Debian's own terms: APT components, packages, commands.

Pure functions of the facts, shared by the checks so that every finding
says the same thing the same way.
"""

from __future__ import annotations

from typing import Optional

from debtorch.facts import get

# Components the NVIDIA driver needs, per Debian release
# (https://wiki.debian.org/NvidiaGraphicsDrivers): bookworm moved firmware to
# non-free-firmware (https://www.debian.org/releases/bookworm/amd64/release-notes/ch-information.en.html#non-free-split).
def driver_components(release: Optional[str]) -> list[str]:
    if release in ("10", "11"):
        return ["contrib", "non-free"]
    return ["contrib", "non-free", "non-free-firmware"]


def headers_package(facts: dict) -> str:
    arch = get(facts, "os.arch") or "x86_64"
    flavour = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "powerpc64le"}.get(arch, "amd64")
    return f"linux-headers-{flavour}"


def enable_components_fix(facts: dict, needed: list[str]) -> str:
    """How to enable ``needed`` components in the sources this machine actually has."""
    entries = get(facts, "apt.sources") or []
    lines = []
    seen = set()
    for e in entries:
        if not e.get("enabled", True) or "deb" not in (e.get("types") or []):
            continue
        suites = e.get("suites") or []
        if not any(s.split("-")[0] in ("buster", "bullseye", "bookworm", "trixie", "forky", "stable", "testing", "sid", "unstable") for s in suites):
            continue
        have = e.get("components") or []
        missing = [c for c in needed if c not in have]
        if not missing:
            continue
        key = (e.get("file"), e.get("format"))
        if key in seen:
            continue
        seen.add(key)
        order = ["main", "contrib", "non-free", "non-free-firmware"]
        merged = [c for c in order if c in have or c in missing] + [c for c in have if c not in order]
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


def driver_install_fix(facts: dict) -> str:
    return (f"sudo apt install {headers_package(facts)} nvidia-driver firmware-misc-nonfree\n"
            "sudo reboot")


def venv_fix(python: str = "python3") -> str:
    return ("sudo apt install python3-venv\n"
            "python3 -m venv ~/venvs/torch\n"
            "~/venvs/torch/bin/pip install torch   # add --index-url for a CUDA variant\n"
            "then run training with ~/venvs/torch/bin/python, or `debtorch doctor --python ~/venvs/torch/bin/python`")
