"""OS facts: distribution and release, kernel, glibc, container, WSL, PEP 668."""

from __future__ import annotations

import re
import shlex
from typing import Optional

from debtorch.facts import Context, Section
from debtorch.host import Host, Unavailable


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


def parse_lsb_release(text: str) -> dict:
    """/etc/lsb-release (DISTRIB_ID=..., DISTRIB_RELEASE=..., DISTRIB_CODENAME=...) -> its
    values under lower-case names without the DISTRIB_ prefix.  Never raises."""
    raw = parse_os_release(text)
    return {k[len("DISTRIB_"):].lower(): v for k, v in raw.items() if k.startswith("DISTRIB_") and v}


_PAREN_CODENAME = re.compile(r"\(([A-Za-z]+)\)")


def identify(os_release: dict, lsb: Optional[dict] = None) -> dict:
    """What the release files say about the distribution, as they say it.  Never raises.

    ``codename`` is VERSION_CODENAME, else the word in VERSION's parentheses
    ("8 (jessie)") or after its comma (Ubuntu 14.04: "14.04.3 LTS, Trusty Tahr"), else
    UBUNTU_CODENAME on Ubuntu, else lsb-release's DISTRIB_CODENAME where lsb-release names
    the distribution os-release does (Linux Mint 17 keeps Ubuntu's os-release beside its own
    lsb-release: its codename is Ubuntu's); Ubuntu-based systems
    also name their Ubuntu (``ubuntu_codename``), LMDE its Debian
    (``debian_codename``, DEBIAN_CODENAME).  ``id`` is lower case, as os-release(5)
    defines it (Deepin and UOS write "Deepin", "UOS").  Which Debian release this is
    (or derives from) is the machine view's question (debtorch/machine/system.py), answered
    from checks/debian.toml.
    """
    lsb = lsb or {}
    version = os_release.get("VERSION") or None
    codename = os_release.get("VERSION_CODENAME") or None
    if not codename and version:
        m = _PAREN_CODENAME.search(version) or re.search(r",\s*([A-Za-z]+)\b", version)
        codename = m.group(1).lower() if m else None
    os_id = (os_release.get("ID") or "").strip().lower()
    if not codename and os_id == "ubuntu":
        codename = os_release.get("UBUNTU_CODENAME") or None
    same = not os_id or re.sub(r"\W", "", lsb.get("id", "").lower()) == re.sub(r"\W", "", os_id)
    if not codename and lsb.get("codename") and same:
        codename = lsb["codename"].lower()
    return {
        "id": (os_release.get("ID") or lsb.get("id") or "").strip().lower() or None,
        "id_like": os_release.get("ID_LIKE") or None,
        "pretty_name": os_release.get("PRETTY_NAME") or lsb.get("description") or None,
        "version": version,
        "version_id": os_release.get("VERSION_ID") or lsb.get("release") or None,
        "codename": codename,
        "ubuntu_codename": os_release.get("UBUNTU_CODENAME") or None,
        "debian_codename": (os_release.get("DEBIAN_CODENAME") or "").strip().lower() or None,
        # Debian 13's base-files also writes the point release here (DEBIAN_VERSION_FULL=13.1,
        # tests/corpus/os-release/distro-debian13), for trees without /etc/debian_version.
        "debian_version_full": (os_release.get("DEBIAN_VERSION_FULL") or "").strip() or None,
    }


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
    return 1 if "Microsoft" in text or "microsoft" in text else None


def parse_glibc(text: str) -> Optional[str]:
    """'glibc 2.36' (getconf GNU_LIBC_VERSION) -> '2.36'.  Never raises."""
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", str(text))
    return m.group(1) if m else None


def collect(host: Host, ctx: Context) -> dict:
    sec = Section()
    text = host.try_read("/etc/os-release") or host.try_read("/usr/lib/os-release")
    lsb_text = host.try_read("/etc/lsb-release")
    osr = parse_os_release(text) if text is not None else {}
    lsb = parse_lsb_release(lsb_text) if lsb_text is not None else {}
    sec.update(identify(osr, lsb))
    dv = host.try_read("/etc/debian_version")
    sec["debian_version"] = dv.strip() if dv and dv.strip() else None
    if text is None and not lsb:
        if sec["debian_version"]:
            # /etc/debian_version is Debian's base-files' (https://packages.debian.org/bookworm/amd64/
            # base-files/filelist); derivatives name themselves in os-release or lsb-release.  A tree
            # with neither is Debian itself: squeeze (6) and older had no /etc/os-release.
            sec["id"] = "debian"
        else:
            sec.unknown("id", "no /etc/os-release")
    sec["platform"] = "linux"

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
