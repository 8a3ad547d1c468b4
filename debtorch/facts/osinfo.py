"""OS facts: distribution and release, kernel, glibc, container, WSL, PEP 668."""

from __future__ import annotations

import re
import shlex
from typing import Optional

from debtorch.facts import Section
from debtorch.host import Host, Unavailable

# Debian codenames and release numbers (https://wiki.debian.org/DebianReleases).
DEBIAN_CODENAMES = {
    "buster": "10",
    "bullseye": "11",
    "bookworm": "12",
    "trixie": "13",
    "forky": "14",
    "duke": "15",
}


def parse_os_release(text: str) -> dict:
    """Parse os-release(5): KEY=value lines, values shell-quoted.  Never raises."""
    out: dict = {}
    for line in str(text).splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        key = key.strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            continue
        try:
            parts = shlex.split(raw, posix=True)
            value = " ".join(parts) if parts else ""
        except ValueError:
            value = raw.strip().strip("\"'")
        out[key] = value
    return out


def debian_release(os_release: dict, debian_version: Optional[str]) -> dict:
    """Which Debian this is, or which Debian it derives from.  Never raises.

    Returns ``release`` ("12", "13", "testing", "sid" or None), ``codename``,
    ``is_debian`` and ``derivative_of`` ("debian" for Ubuntu and friends).
    """
    os_id = (os_release.get("ID") or "").lower()
    like = (os_release.get("ID_LIKE") or "").lower().split()
    dv = (debian_version or "").strip()
    codename = os_release.get("VERSION_CODENAME") or None
    out = {
        "is_debian": os_id == "debian",
        "derivative_of": None,
        "release": None,
        "codename": codename,
        "point_release": None,
    }
    if os_id != "debian":
        if "debian" in like or "ubuntu" in like or dv:
            out["derivative_of"] = "debian"
        # The Debian a derivative is based on, from /etc/debian_version ("trixie/sid").
        base = dv.split("/")[0] if dv else ""
        out["debian_base"] = DEBIAN_CODENAMES.get(base, base or None) if base else None
        return out
    version_id = os_release.get("VERSION_ID")
    if version_id:
        out["release"] = version_id.split(".")[0]
    elif "/sid" in dv or dv == "sid" or (codename == "sid"):
        # Testing and unstable both say "<next>/sid"; the APT suites tell them apart.
        out["release"] = "sid" if codename == "sid" else "testing"
        if not codename and "/" in dv:
            out["codename"] = dv.split("/")[0] or None
    elif codename in DEBIAN_CODENAMES:
        out["release"] = DEBIAN_CODENAMES[codename]
    if re.fullmatch(r"\d+(\.\d+)*", dv):
        out["point_release"] = dv
        if out["release"] is None:
            out["release"] = dv.split(".")[0]
    return out


def detect_container(host: Host) -> tuple[Optional[str], list[str]]:
    """(kind, evidence).  kind: docker, podman, lxc, kubernetes, systemd-nspawn, other."""
    evidence: list[str] = []
    kind: Optional[str] = None
    marker = host.try_read("/run/systemd/container")
    if marker and marker.strip():
        kind = marker.strip().split()[0]
        evidence.append(f"/run/systemd/container says {kind}")
    if host.exists("/run/.containerenv"):
        kind = kind or "podman"
        evidence.append("/run/.containerenv exists")
    if host.exists("/.dockerenv"):
        kind = kind or "docker"
        evidence.append("/.dockerenv exists")
    cgroup = host.try_read("/proc/1/cgroup") or ""
    if "kubepods" in cgroup:
        kind = "kubernetes"
        evidence.append("/proc/1/cgroup names kubepods")
    elif "docker" in cgroup and kind is None:
        kind = "docker"
        evidence.append("/proc/1/cgroup names docker")
    elif "/lxc" in cgroup and kind is None:
        kind = "lxc"
        evidence.append("/proc/1/cgroup names lxc")
    env = host.environ
    if env.get("KUBERNETES_SERVICE_HOST"):
        kind = "kubernetes"
        evidence.append("KUBERNETES_SERVICE_HOST is set")
    if kind == "container-other":
        kind = "other"
    return kind, evidence


def detect_wsl(kernel_release: str, proc_version: str) -> Optional[int]:
    """2 for WSL2, 1 for WSL1, None otherwise."""
    text = f"{kernel_release} {proc_version}"
    if "WSL2" in text or "microsoft-standard" in text.lower():
        return 2
    if "Microsoft" in text or "microsoft" in text:
        return 1
    return None


def parse_glibc(text: str) -> Optional[str]:
    """'glibc 2.36' (getconf GNU_LIBC_VERSION) -> '2.36'.  Never raises."""
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", str(text))
    return m.group(1) if m else None


def collect(host: Host, ctx) -> dict:
    sec = Section()
    text = host.try_read("/etc/os-release") or host.try_read("/usr/lib/os-release")
    if text is None:
        sec.unknown("id", "no /etc/os-release")
        osr: dict = {}
    else:
        osr = parse_os_release(text)
        sec["id"] = osr.get("ID")
        sec["id_like"] = osr.get("ID_LIKE")
        sec["pretty_name"] = osr.get("PRETTY_NAME")
        sec["version_id"] = osr.get("VERSION_ID")
    dv = host.try_read("/etc/debian_version")
    sec["debian_version"] = dv.strip() if dv else None
    sec.update(debian_release(osr, dv))
    if sec.get("release") == "testing":
        # Testing and sid look alike in os-release; APT's suites tell them apart.
        suites = set((ctx.section("apt") or {}).get("suites") or [])
        if suites & {"sid", "unstable"} and not suites & {"testing", sec.get("codename") or "?"}:
            sec["release"] = "sid"

    try:
        sec["kernel"] = host.read_text("/proc/sys/kernel/osrelease").strip()
    except Unavailable as exc:
        sec.unknown("kernel", exc.reason)
    hostname = host.try_read("/proc/sys/kernel/hostname")
    sec.set_or_unknown("hostname", hostname.strip() if hostname else None, "no /proc/sys/kernel/hostname")
    sec["user"] = host.user
    proc_version = host.try_read("/proc/version") or ""
    sec["arch"] = host.machine
    sec["wsl"] = detect_wsl(sec.get("kernel") or "", proc_version)

    res = host.run(["getconf", "GNU_LIBC_VERSION"], timeout=3)
    glibc = parse_glibc(res.stdout) if res.ok else None
    sec.set_or_unknown("glibc", glibc, res.reason or "unrecognised getconf output")

    kind, evidence = detect_container(host)
    sec["container"] = kind
    sec["container_evidence"] = evidence

    # PEP 668: Debian marks its own Python "externally managed".
    managed = [f"python3.{n}" for n in range(5, 21) if host.exists(f"/usr/lib/python3.{n}/EXTERNALLY-MANAGED")]
    sec["externally_managed"] = bool(managed)
    sec["externally_managed_pythons"] = managed
    sec["system_python"] = "/usr/bin/python3" if host.exists("/usr/bin/python3") else None
    return sec
